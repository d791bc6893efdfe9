package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/service"
)

// RoomResult is the room round of the demo (Config.Room): a sale with a
// waiting room. Buyers join before draw_until (the draw) and after it
// (first come, first served); the room admits as many as there are units;
// one admitted buyer never buys and lapses, one buyer cancels, and each
// unit that comes back goes to the next buyer in line.
type RoomResult struct {
	Sale        string
	Stock       int64
	AdmitTTL    time.Duration
	Buyers      []RoomBuyer // in the published order: the draw's, then arrival
	DrawChecked string      // "" if admission.Verify accepted the published draw, else why not
	// Admitted are the buyers the room admitted, in the order of their
	// grants (their admitted_until; the published order within one grant
	// time, as one step of the room admits).
	Admitted []string
	// MostLive is the most admissions out at once that were not used.
	MostLive int
	Sold     int64
	Took     time.Duration
}

// RoomBuyer is what one buyer of the room round saw.
type RoomBuyer struct {
	Name       string
	InDraw     bool
	FirstSeen  string    // what the join answered: status, and position if waiting
	Outcome    string    // bought, lapsed, bought then cancelled, sold_out
	AdmittedAt int       // 1-based rank among the admitted; 0: never admitted
	Until      time.Time // the admission's admitted_until, zero if never admitted
	WaitedFor  time.Duration
}

// OK: the room admitted buyers in the published order exactly (the draw's,
// then arrival), never had more unused admissions out than units, the
// draw checked, every unit was sold, and every buyer ended bought, lapsed
// or sold out.
func (r RoomResult) OK() bool {
	if r.DrawChecked != "" || r.Sold != r.Stock || r.MostLive > int(r.Stock) || len(r.Admitted) == 0 {
		return false
	}
	for i, name := range r.Admitted {
		if i >= len(r.Buyers) || r.Buyers[i].Name != name {
			return false
		}
	}
	for _, b := range r.Buyers {
		if b.Outcome == "" {
			return false
		}
	}
	return true
}

// roomPlace is the part of a place the demo reads.
type roomPlace struct {
	Status    string    `json:"status"`
	Position  int64     `json:"position"`
	InDraw    bool      `json:"in_draw"`
	Admission string    `json:"admission"`
	Until     time.Time `json:"admitted_until"`
	OrderID   string    `json:"order_id"`
}

// roomRound runs the room round on the running service.
func roomRound(ctx context.Context, c *client, cfg Config) (RoomResult, error) {
	start := time.Now()
	res := RoomResult{Sale: "demo-room-" + strconv.FormatInt(time.Now().UnixMilli(), 36), Stock: 4, AdmitTTL: cfg.RoomAdmitTTL}
	drawUntil := time.Now().Add(1500 * time.Millisecond).UTC().Truncate(time.Millisecond)
	sale := map[string]any{"id": res.Sale, "per_user_limit": 1, "starts_at": drawUntil.Format(time.RFC3339Nano),
		"items": []map[string]any{{"sku": hotSKU, "stock": res.Stock}},
		"admission": map[string]any{"draw_until": drawUntil.Format(time.RFC3339Nano),
			"admit_ttl_s": int64(res.AdmitTTL / time.Second)}}
	if status, body, err := c.do(ctx, "POST", "/v1/admin/sales", c.admin, sale, nil); err != nil || status != http.StatusCreated {
		return res, fmt.Errorf("create the room's sale: %d %s %v", status, body, err)
	}
	queue := "/v1/sales/" + res.Sale + "/queue"
	tokens := map[string]string{}
	joined := map[string]string{} // what each buyer's join answered
	join := func(name string) error {
		token, err := service.SignUser(c.secret, name, nil)
		if err != nil {
			return err
		}
		tokens[name] = token
		status, body, err := c.do(ctx, "POST", queue, token, nil, nil)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("join %s: %d %s", name, status, body)
		}
		var p roomPlace
		if err == nil {
			err = json.Unmarshal(body, &p)
		}
		joined[name] = p.Status
		if p.Status == "waiting" {
			joined[name] += " #" + strconv.FormatInt(p.Position, 10)
		}
		return err
	}
	// Eight join before draw_until, in the order of their names: the draw
	// decides their order, not who came first. Four come after it.
	var names []string
	for i := range 8 {
		names = append(names, "early-"+strconv.Itoa(i+1))
	}
	for _, n := range names {
		if err := join(n); err != nil {
			return res, err
		}
	}
	time.Sleep(time.Until(drawUntil) + 50*time.Millisecond)
	for i := range 4 {
		n := "late-" + strconv.Itoa(i+1)
		names = append(names, n)
		if err := join(n); err != nil {
			return res, err
		}
	}

	// The published draw: checked as anyone can, and the published order
	// (the draw's, then arrival) the admissions must follow.
	var draw admission.Draw
	for deadline := time.Now().Add(10 * time.Second); ; {
		status, body, err := c.do(ctx, "GET", queue+"/draw", "", nil, nil)
		if err != nil || status != http.StatusOK {
			return res, fmt.Errorf("read the draw: %d %s %v", status, body, err)
		}
		if err := json.Unmarshal(body, &draw); err != nil {
			return res, fmt.Errorf("read the draw: %w", err)
		}
		if draw.Secret != "" {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the draw did not run within 10 s of draw_until")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := admission.Verify(draw); err != nil {
		res.DrawChecked = err.Error()
	}
	byEntry := map[string]string{}
	for _, n := range names {
		byEntry[admission.Entry(res.Sale, n)] = n
	}
	for _, e := range draw.Order {
		res.Buyers = append(res.Buyers, RoomBuyer{Name: byEntry[e], InDraw: true})
	}
	for _, n := range names[8:] {
		res.Buyers = append(res.Buyers, RoomBuyer{Name: n})
	}
	for i := range res.Buyers {
		res.Buyers[i].FirstSeen = joined[res.Buyers[i].Name]
	}

	// Every buyer polls their place. The first admitted buyer of the draw
	// never buys (a lapse); the second buys and then cancels (a unit back).
	sleeper, canceller := res.Buyers[0].Name, res.Buyers[1].Name
	buy := func(name, admissionToken string) (string, error) {
		status, body, err := c.do(ctx, "POST", "/v1/sales/"+res.Sale+"/orders", tokens[name],
			map[string]any{"items": []map[string]any{{"sku": hotSKU, "qty": 1}}}, map[string]string{"X-Purchase-Token": admissionToken})
		if err != nil || status != http.StatusCreated {
			return "", fmt.Errorf("%s's admitted buy: %d %s %v", name, status, body, err)
		}
		var o struct {
			OrderID string `json:"order_id"`
		}
		return o.OrderID, json.Unmarshal(body, &o)
	}
	live := map[string]bool{}
	deadline := time.Now().Add(res.AdmitTTL + 20*time.Second)
	for {
		done := true
		for i := range res.Buyers {
			b := &res.Buyers[i]
			if b.Outcome != "" {
				continue
			}
			done = false
			status, body, err := c.do(ctx, "GET", queue, tokens[b.Name], nil, nil)
			if err != nil || status != http.StatusOK {
				return res, fmt.Errorf("%s's place: %d %s %v", b.Name, status, body, err)
			}
			var p roomPlace
			if err := json.Unmarshal(body, &p); err != nil {
				return res, err
			}
			switch p.Status {
			case "admitted":
				if b.Until.IsZero() {
					b.Until, b.WaitedFor = p.Until, time.Since(start)
				}
				live[b.Name] = true
				if b.Name == sleeper {
					continue
				}
				order, err := buy(b.Name, p.Admission)
				if err != nil {
					return res, err
				}
				delete(live, b.Name)
				if b.Name == canceller {
					status, body, err := c.do(ctx, "POST", "/v1/orders/"+order+"/cancel", tokens[b.Name], nil, nil)
					if err != nil || status != http.StatusOK {
						return res, fmt.Errorf("%s's cancel: %d %s %v", b.Name, status, body, err)
					}
					b.Outcome = "bought, then cancelled: the unit went back"
				}
			case "used":
				if b.Outcome == "" {
					b.Outcome = "bought"
				}
				delete(live, b.Name)
			case "lapsed":
				b.Outcome = "admitted, never bought: lapsed after " + res.AdmitTTL.String()
				delete(live, b.Name)
			case "sold_out":
				b.Outcome = "sold out"
			}
		}
		res.MostLive = max(res.MostLive, len(live))
		if done {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the room round did not end within %v", res.AdmitTTL+20*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.Admitted = admittedOrder(res.Buyers)
	status, body, err := c.do(ctx, "GET", "/v1/sales/"+res.Sale, "", nil, nil)
	if err != nil || status != http.StatusOK {
		return res, fmt.Errorf("read the room's sale: %d %s %v", status, body, err)
	}
	var st struct {
		Items []struct {
			Sold int64 `json:"sold"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &st); err != nil || len(st.Items) != 1 {
		return res, fmt.Errorf("read the room's sale: %s %v", body, err)
	}
	res.Sold, res.Took = st.Items[0].Sold, time.Since(start)
	return res, nil
}

// admittedOrder names the admitted buyers in the order of their grants,
// bs's order among those granted at once, and numbers them (AdmittedAt).
func admittedOrder(bs []RoomBuyer) []string {
	var got []*RoomBuyer
	for i := range bs {
		if !bs[i].Until.IsZero() {
			got = append(got, &bs[i])
		}
	}
	slices.SortStableFunc(got, func(a, b *RoomBuyer) int { return a.Until.Compare(b.Until) })
	names := make([]string, len(got))
	for i, b := range got {
		b.AdmittedAt, names[i] = i+1, b.Name
	}
	return names
}

// printRoom writes the room round's table.
func printRoom(w io.Writer, r RoomResult) {
	fmt.Fprintf(w, "\nroom round: %d units, 8 buyers join before the draw and 4 after it; admissions last %v\n",
		r.Stock, r.AdmitTTL)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "buyer\tin the draw\tjoined as\tadmitted\twhat happened\n")
	for _, b := range r.Buyers {
		at := "-"
		if b.AdmittedAt > 0 {
			at = "#" + strconv.Itoa(b.AdmittedAt) + " after " + b.WaitedFor.Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\n", b.Name, b.InDraw, b.FirstSeen, at, b.Outcome)
	}
	_ = tw.Flush()
	order := "the published order (the draw's, then arrival), exactly"
	if !slices.Equal(r.Admitted, namesOf(r.Buyers)[:min(len(r.Admitted), len(r.Buyers))]) {
		order = "NOT the published order: " + strings.Join(r.Admitted, ", ")
	}
	draw := "checked (secret, commitment, digest, seed, order)"
	if r.DrawChecked != "" {
		draw = "DOES NOT CHECK: " + r.DrawChecked
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range []struct {
		k string
		v any
	}{
		{"the published draw", draw},
		{"admitted in", order},
		{"most unused admissions out at once", fmt.Sprintf("%d (units: %d)", r.MostLive, r.Stock)},
		{"sold", fmt.Sprintf("%d of %d", r.Sold, r.Stock)},
		{"took", r.Took.Round(time.Millisecond)},
	} {
		fmt.Fprintf(tw, "%s\t%v\n", row.k, row.v)
	}
	_ = tw.Flush()
}

func namesOf(bs []RoomBuyer) []string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.Name
	}
	return names
}
