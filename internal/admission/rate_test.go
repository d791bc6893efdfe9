package admission

import (
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/redistest"
)

// TestRateOverAMinute (SECKILL_ROOM_RATE=1, about 70 s): a room at a fixed
// 1,000 admissions a second, stepped every 20 ms by two clients (two
// instances) on Redis's own clock for a minute: every whole second's
// admissions, by Redis's clock, are within 2% of the rate. It logs the
// lowest and highest second.
func TestRateOverAMinute(t *testing.T) {
	if os.Getenv("SECKILL_ROOM_RATE") != "1" {
		t.Skip("set SECKILL_ROOM_RATE=1 to measure a room's rate over a minute")
	}
	const rate, seconds = 1000, 60
	b := redistest.Backends()[0]
	r := newRig(t, b, false)
	r.sale("rated", 0, "X", -1)
	r.create("rated", Config{OpensAt: time.Now().Add(-time.Minute), DrawUntil: time.Now().Add(-time.Minute),
		RatePerS: rate, CapacityPerS: 1000, AdmitTTL: 10 * time.Minute, MaxWaiting: 100000})
	r.step("rated") // loads the script
	all := users("u", rate*(seconds+5))
	for i := 0; i < len(all); i += 1000 {
		pipe := r.rdb.Pipeline()
		for _, u := range all[i:min(i+1000, len(all))] {
			pipe.EvalSha(r.ctx, roomScript.SHA, r.rooms.keys("rated"), "join", "", u)
		}
		if _, err := pipe.Exec(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	perSecond := map[int64]int64{} // Redis's unix second -> admissions (room:rate)
	collect := func() {
		v, err := r.rdb.HGetAll(r.ctx, r.rooms.key("rated", "room:rate")).Result()
		if err != nil {
			t.Fatal(err)
		}
		for k, n := range v {
			s, _ := strconv.ParseInt(k, 10, 64)
			c, _ := strconv.ParseInt(n, 10, 64)
			perSecond[s] = c
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		rooms := r.newRooms(b.Client(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < (seconds+1)*time.Second {
				if _, err := rooms.Step(r.ctx, "rated"); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	for time.Since(start) < (seconds+1)*time.Second {
		time.Sleep(5 * time.Second)
		collect()
	}
	wg.Wait()
	collect()
	secs := make([]int64, 0, len(perSecond))
	for s := range perSecond {
		secs = append(secs, s)
	}
	slices.Sort(secs)
	if len(secs) < seconds {
		t.Fatalf("only %d seconds of admissions: %v", len(secs), perSecond)
	}
	whole := secs[1 : len(secs)-1] // the first and last seconds are partial
	lo, hi := int64(rate*10), int64(0)
	for _, s := range whole {
		n := perSecond[s]
		lo, hi = min(lo, n), max(hi, n)
		if n < rate*98/100 || n > rate*102/100 {
			t.Errorf("second %d: %d admissions, want %d ± 2%%", s, n, rate)
		}
	}
	t.Logf("%d whole seconds at %d/s, two clients stepping every 20 ms: lowest %d, highest %d", len(whole), rate, lo, hi)
}

// TestNoBurstAfterALull: a room stepped while nobody waits builds no
// credit: a crowd that joins after the lull is admitted at the rate from
// its first step, not in a burst of what the idle time would have allowed.
func TestNoBurstAfterALull(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "X", -1)
		cfg := config()
		cfg.RatePerS, cfg.DrawUntil, cfg.MaxWaiting = 1000, cfg.OpensAt, 10000
		r.create("s", cfg)
		r.clock.Set(t0)
		for _, u := range users("early", 21) { // the clock runs: its first step admits all 21
			r.join("s", u)
		}
		for range 5 {
			r.step("s")
			r.clock.Add(20 * time.Millisecond)
		}
		if st := r.stats("s"); st.Admitted != 21 || st.Waiting != 0 {
			t.Fatalf("before the lull: %+v", st)
		}
		for range 100 { // two seconds of steps with nobody waiting
			r.step("s")
			r.clock.Add(20 * time.Millisecond)
		}
		for _, u := range users("u", 3000) {
			r.join("s", u)
		}
		var first int
		for i := 0; i < 50; i++ { // the crowd's first second
			first += r.step("s").Admitted
			r.clock.Add(20 * time.Millisecond)
		}
		if first > 1000*102/100+1 || first < 1000*98/100 {
			t.Errorf("%d admitted in the second after a lull, at 1000/s", first)
		}
	})
}
