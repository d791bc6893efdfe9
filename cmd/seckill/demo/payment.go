package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/service"
)

// PaymentResult is the payment round of the demo (Config.PaymentTimeout):
// a sale whose orders must be paid in time; some early buyers never pay,
// their reservations expire, and later buyers get those units.
type PaymentResult struct {
	Sale           string
	Stock          int64
	Timeout        time.Duration
	EarlyPaid      int // early buyers who paid
	EarlyUnpaid    int // early buyers who never paid
	Expired        int // orders the database holds as expired
	LateBought     int // units later buyers got (and paid) after the expiries
	Sold           int64
	Remaining      int64
	ConfirmedInDB  int // confirmed (paid) orders in the database
	AwaitingAtPeak int64
	Took           time.Duration
}

// OK: every unpaid reservation expired, each of its units went to a later
// buyer, and the sale ends sold out with only paid orders.
func (p PaymentResult) OK() bool {
	return p.Expired == p.EarlyUnpaid && p.LateBought == p.EarlyUnpaid && p.Sold == p.Stock && p.Remaining == 0 &&
		p.ConfirmedInDB == int(p.Stock) && p.AwaitingAtPeak == int64(p.EarlyUnpaid)
}

// paymentRound runs the payment round on the running service.
func paymentRound(ctx context.Context, svc *service.Service, c *client, cfg Config) (PaymentResult, error) {
	start := time.Now()
	res := PaymentResult{Sale: "demo-pay-" + strconv.FormatInt(time.Now().UnixMilli(), 36),
		Stock: min(cfg.HotStock, 30), Timeout: cfg.PaymentTimeout}
	secs := max(int64((cfg.PaymentTimeout+time.Second-1)/time.Second), 1)
	res.Timeout = time.Duration(secs) * time.Second
	sale := map[string]any{"id": res.Sale, "per_user_limit": 1, "payment_timeout_s": secs,
		"items": []map[string]any{{"sku": hotSKU, "stock": res.Stock}}}
	if status, body, err := c.do(ctx, "POST", "/v1/admin/sales", c.admin, sale, nil); err != nil || status != http.StatusCreated {
		return res, fmt.Errorf("create the payment sale: %d %s %v", status, body, err)
	}
	// buy buys one unit as user and pays for it unless pays is false;
	// it reports whether the buy was accepted.
	buy := func(user string, pays bool) (bool, error) {
		token, err := service.SignUser(c.secret, user, nil)
		if err != nil {
			return false, err
		}
		status, body, err := c.do(ctx, "POST", "/v1/sales/"+res.Sale+"/orders", token,
			map[string]any{"items": []map[string]any{{"sku": hotSKU, "qty": 1}}}, nil)
		if err != nil || status != http.StatusCreated {
			return false, err
		}
		var o struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(body, &o); err != nil || !pays {
			return err == nil, err
		}
		status, body, err = c.do(ctx, "POST", "/v1/orders/"+o.OrderID+"/pay", token, map[string]any{"payment_ref": "pay-" + user}, nil)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("pay: %d %s", status, body)
		}
		return true, err
	}

	// The early buyers take every unit; every third never pays.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range int(res.Stock) {
		pays := i%3 != 0
		if pays {
			res.EarlyPaid++
		} else {
			res.EarlyUnpaid++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := buy("early-"+strconv.Itoa(i), pays)
			if err == nil && !ok {
				err = fmt.Errorf("early buyer %d was refused", i)
			}
			if err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	st, err := svc.Engine().Stock(ctx, res.Sale)
	if err != nil {
		return res, err
	}
	res.AwaitingAtPeak = st.Items[0].Awaiting

	// Later buyers keep trying; the expired reservations' units are theirs.
	deadline := time.Now().Add(cfg.PaymentTimeout + 20*time.Second)
	for late := 0; res.LateBought < res.EarlyUnpaid && time.Now().Before(deadline); late++ {
		ok, err := buy("late-"+strconv.Itoa(late), true)
		if err != nil {
			return res, err
		}
		if ok {
			res.LateBought++
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Everything in the database.
	db := svc.Store()
	for time.Now().Before(deadline) {
		counts, err := db.CountOrders(ctx, res.Sale)
		if err != nil {
			return res, err
		}
		res.ConfirmedInDB = counts[inventory.OrderConfirmed]
		if res.ConfirmedInDB+counts[inventory.OrderCancelled] >= int(res.Stock)+res.EarlyUnpaid {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	snap, err := db.Snapshot(ctx, res.Sale)
	if err != nil {
		return res, err
	}
	for _, o := range snap.Orders {
		if o.Payment == inventory.PaymentExpired {
			res.Expired++
		}
	}
	if st, err = svc.Engine().Stock(ctx, res.Sale); err != nil {
		return res, err
	}
	res.Sold, res.Remaining, res.Took = st.Items[0].Sold, st.Items[0].Remaining, time.Since(start)
	return res, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// printPayment writes the payment round's table.
func printPayment(w io.Writer, p PaymentResult) {
	fmt.Fprintf(w, "\npayment round: %d units, pay within %v; every third early buyer never pays\n", p.Stock, p.Timeout)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range []struct {
		k string
		v any
	}{
		{"early buyers who paid", p.EarlyPaid},
		{"early buyers who never paid", p.EarlyUnpaid},
		{"units awaiting payment at the peak", p.AwaitingAtPeak},
		{"reservations expired", p.Expired},
		{"units later buyers got after the expiries", p.LateBought},
		{"sold (all paid) / remaining", fmt.Sprintf("%d / %d", p.Sold, p.Remaining)},
		{"confirmed orders in the database", p.ConfirmedInDB},
		{"took", p.Took.Round(time.Millisecond)},
	} {
		fmt.Fprintf(tw, "%s\t%v\n", row.k, row.v)
	}
	_ = tw.Flush()
}
