package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// sameOutcome fails unless two readings of a buy's body agree: the same
// lines, or the same answer (status, code, message).
func sameOutcome(t *testing.T, body []byte, got, want []inventory.Line, gotErr, wantErr error) {
	t.Helper()
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: %v, %v; decode says %v, %v", body, got, gotErr, want, wantErr)
	}
	if gotErr != nil {
		g, w := toAPI(gotErr), toAPI(wantErr)
		if g.Status != w.Status || g.Code != w.Code || g.Message != w.Message {
			t.Fatalf("%q: refused with %d %s %q; decode says %d %s %q", body, g.Status, g.Code, g.Message, w.Status, w.Code, w.Message)
		}
		return
	}
	if len(got) != len(want) || len(got) > 0 && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: lines %+v; decode says %+v", body, got, want)
	}
}

var buyBodySeeds = []string{
	`{"items":[{"sku":"A","qty":1}]}`,
	`{"items":[{"sku":"A","qty":1,}]}`, `{"items":[{"qty":1,"sku":"A",}]}`, // trailing commas: malformed
	` { "items" : [ { "qty" : 2 , "sku" : "B" } , {"sku":"A","qty":1000000000} ] } `,
	`{"items":[]}`, `{"items":null}`, `{"items":[null]}`, `{}`, `null`, `[]`, `"x"`, `1`, ``, ` `,
	`{"items":[{"sku":"A","qty":0}]}`, `{"items":[{"sku":"A","qty":-0}]}`, `{"items":[{"sku":"A","qty":-5}]}`,
	`{"items":[{"sku":"A","qty":1.5}]}`, `{"items":[{"sku":"A","qty":1e2}]}`, `{"items":[{"sku":"A","qty":"1"}]}`,
	`{"items":[{"sku":"A","qty":123456789012345678}]}`, `{"items":[{"sku":"A","qty":1234567890123456789}]}`,
	`{"items":[{"sku":"A","qty":99999999999999999999}]}`, `{"items":[{"sku":"A","qty":01}]}`,
	`{"items":[{"sku":"A","qty":1}],"coupon":"x"}`, `{"items":[{"sku":"A","qty":1,"x":1}]}`,
	`{"items":[{"sku":"A"}]}`, `{"items":[{"qty":1}]}`, `{"items":[{}]}`, `{"items":[{"sku":null,"qty":1}]}`,
	`{"items":[{"sku":"A","qty":1},{"sku":"A","qty":1}]}`, `{"items":[{"sku":"a/b","qty":1}]}`,
	`{"items":[{"sku":"A","sku":"B","qty":1}]}`, `{"items":[{"sku":"A","qty":1}],"items":[]}`,
	`{"Items":[{"sku":"A","qty":1}]}`, `{"items":[{"SKU":"A","qty":1}]}`, `{"items":[{"sku":"A","QTY":1}]}`,
	`{"items":[{"sku":"\u0041","qty":1}]}`, `{"items":[{"sku":"é","qty":1}]}`, "{\"items\":[{\"sku\":\"\xff\",\"qty\":1}]}",
	`{"items":[{"sku":"A","qty":1}]} {}`, `{"items":[{"sku":"A","qty":1}]}x`, `{"items":[{"sku":"A","qty":1}]`,
	`{"items":[{"sku":"A","qty":1},]}`, `{"items":{"sku":"A","qty":1}}`, `{"items":[{"sku":1,"qty":1}]}`,
	`{"items":[{"sku":"A","qty":true}]}`, `{"items":[{"sku":"A","qty":null}]}`, `{"items":[[]]}`,
	`{"items":[{"sku":"` + strings.Repeat("A", 65) + `","qty":1}]}`,
	`{"items":[{"sku":"A","qty":1}]}` + strings.Repeat(" ", 70<<10),
}

// FuzzBuyBody: the buy path's reader of a buy's body (buyLines) gives,
// for any body, what decode, the reflective reader, gives: the same lines
// or the same 400; and whatever the fast reader takes, decode takes as
// the same lines.
//
//	go test -run '^$' -fuzz FuzzBuyBody -fuzztime 1m ./service/
func FuzzBuyBody(f *testing.F) {
	for _, s := range buyBodySeeds {
		f.Add([]byte(s), "s1", "alice", "")
	}
	f.Add([]byte(`{"items":[{"sku":"A","qty":1}]}`), "s 1", "alice", "k")
	f.Add([]byte(`{"items":[{"sku":"A","qty":1}]}`), "s1", "", "key with space")
	f.Add([]byte(`{"items":[{"sku":"A","qty":1}]}`), "s1", "u", strings.Repeat("k", 65))
	f.Fuzz(func(t *testing.T, body []byte, saleID, userID, key string) {
		if len(body) > maxBody {
			return // readBody's, tested by TestReadBody
		}
		want, wantErr := slowBuyLines(body)
		got, gotErr := buyLines(body)
		sameOutcome(t, body, got, want, gotErr, wantErr)
		if fast, ok := fastBuyLines(body); ok {
			sameOutcome(t, body, fast, want, nil, wantErr)
		}
	})
}

// TestBuyBodyFast: the bodies clients send are read by the fast reader,
// and the answers to bad ones are today's, word for word.
func TestBuyBodyFast(t *testing.T) {
	for _, c := range []struct {
		body string
		want []inventory.Line
	}{
		{`{"items":[{"sku":"A","qty":1}]}`, []inventory.Line{{SKU: "A", Qty: 1}}},
		{"{\n  \"items\": [\n    {\"qty\": 2, \"sku\": \"B-1.x:y_z\"},\n    {\"sku\": \"A\", \"qty\": 1000000000}\n  ]\n}\n",
			[]inventory.Line{{SKU: "B-1.x:y_z", Qty: 2}, {SKU: "A", Qty: 1_000_000_000}}},
		{`{"items":[{"sku":"A","qty":-3}]}`, []inventory.Line{{SKU: "A", Qty: -3}}}, // ValidateBuy's to refuse
	} {
		got, ok := fastBuyLines([]byte(c.body))
		if !ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("fastBuyLines(%q) = %+v, %v; want %+v", c.body, got, ok, c.want)
		}
	}
	for body, msg := range map[string]string{
		`{"items":[{"sku":"A","qty":1}],"coupon":"x"}`:       `unknown field "coupon"`,
		`{"items":[{"SKU":"A","qty":1}]}`:                    `unknown field items[0].SKU`,
		`{"items":[{"sku":"A","qty":1}],"items":[]}`:         `repeated field items`,
		`{"items":[{"sku":"A"}]}`:                            `items[0] needs sku and qty`,
		`{"items":[{"sku":"A","qty":1.5}]}`:                  `items.qty must be an integer`,
		`{"items":[{"sku":"A","qty":1}]} {}`:                 `the body must hold exactly one JSON object`,
		`[]`:                                                 `the body must be a JSON object`,
		`{"items":[{"sku":"A","qty":1}]`:                     `malformed JSON`,
		`{"items":[{"sku":"A","qty":99999999999999999999}]}`: `items.qty must be an integer`,
	} {
		_, err := buyLines([]byte(body))
		var api *apiError
		if !errors.As(err, &api) || api.Status != http.StatusBadRequest || api.Message != msg {
			t.Errorf("buyLines(%q) = %v; want 400 %q", body, err, msg)
		}
	}
}

// TestReadBody: a body is read whole up to 64 KiB, with or without a
// Content-Length, and refused beyond, as decode refuses it.
func TestReadBody(t *testing.T) {
	ok := `{"items":[{"sku":"A","qty":1}]}`
	big := `{"items":[{"sku":"A","qty":1}]}` + strings.Repeat(" ", maxBody)
	for _, c := range []struct {
		name    string
		body    string
		chunked bool
		lines   int
		msg     string
	}{
		{"sized", ok, false, 1, ""},
		{"chunked", ok, true, 1, ""},
		{"exactly 64 KiB", ok + strings.Repeat(" ", maxBody-len(ok)), true, 1, ""},
		{"sized over 64 KiB", big, false, 0, "the body is larger than 64 KiB"},
		{"chunked over 64 KiB", big, true, 0, "the body is larger than 64 KiB"},
		{"empty", "", false, 0, "malformed JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/sales/s1/orders", strings.NewReader(c.body))
			if c.chunked {
				r.ContentLength = -1
				r.Body = io.NopCloser(struct{ io.Reader }{strings.NewReader(c.body)})
			}
			lines, err := decodeBuy(&httpExchange{w: httptest.NewRecorder(), r: r})
			var api *apiError
			switch {
			case c.msg == "" && (err != nil || len(lines) != c.lines):
				t.Fatalf("%d lines, %v", len(lines), err)
			case c.msg != "" && (!errors.As(err, &api) || api.Message != c.msg):
				t.Fatalf("%v; want %q", err, c.msg)
			}
		})
	}
}

// orderSeeds are orders whose answer writeOrder must spell as writeJSON.
func orderSeeds() []inventory.Order {
	at := time.Date(2026, 11, 25, 13, 0, 0, 123_456_000, time.UTC)
	return []inventory.Order{
		{ID: "s1.01JD0000000000000000000000", SaleID: "s1", UserID: "alice", Status: "pending", CreatedAt: at,
			Items: []inventory.Line{{SKU: "A", Qty: 1}, {SKU: "B", Qty: 2}}},
		{ID: "o", SaleID: "s", UserID: "u", Status: "confirmed", CreatedAt: at.Truncate(time.Second).In(time.FixedZone("x", -(5*3600 + 30*60)))},
		{ID: "<o>&\"\\", SaleID: "é\u2028", UserID: "\x00\n\t\b\f\xff", Status: "cancelled", Items: []inventory.Line{{SKU: "<", Qty: -1}}},
		{CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{CreatedAt: at.In(time.FixedZone("far", 24*3600))},
		{CreatedAt: at.In(time.FixedZone("seconds", 3600+17))},
		{ID: "p", SaleID: "s", UserID: "u", Status: "pending", CreatedAt: at, Items: []inventory.Line{{SKU: "A", Qty: 1}},
			Payment: inventory.PaymentAwaiting, PayBy: at.Add(time.Minute)},
		{ID: "p", SaleID: "s", UserID: "u", Status: "confirmed", CreatedAt: at, Payment: inventory.PaymentPaid, PaymentRef: "r<&>\"x"},
		{ID: "p", SaleID: "s", UserID: "u", Status: "cancelled", CreatedAt: at, Payment: inventory.PaymentExpired,
			PayBy: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
}

// FuzzWriteOrder: writeOrder's answer is writeJSON's of orderBody, byte
// for byte, headers and status included.
func FuzzWriteOrder(f *testing.F) {
	for _, o := range orderSeeds() {
		var sku string
		if len(o.Items) > 0 {
			sku = o.Items[0].SKU
		}
		f.Add(o.ID, o.SaleID, o.UserID, string(o.Status), sku, int64(3), int64(-1), o.CreatedAt.UnixNano(), 0, uint8(2))
	}
	f.Add("a", "b", "c", "pending", "A", int64(1), int64(41), int64(-1)<<62, 3600*25, uint8(1))
	f.Fuzz(func(t *testing.T, id, sale, user, status, sku string, qty, remaining, at int64, zone int, n uint8) {
		o := inventory.Order{ID: id, SaleID: sale, UserID: user, Status: inventory.OrderStatus(status),
			CreatedAt: time.Unix(0, at).In(time.FixedZone("z", zone%(30*3600)))}
		rem := []int64{}
		for i := range int(n % 4) {
			o.Items = append(o.Items, inventory.Line{SKU: sku + itoa(i), Qty: qty + int64(i)})
			rem = append(rem, remaining-int64(i))
		}
		for _, r := range [][]int64{nil, rem, rem[:len(rem)/2]} {
			checkWriteOrder(t, o, r)
		}
	})
}

func TestWriteOrder(t *testing.T) {
	for _, o := range orderSeeds() {
		checkWriteOrder(t, o, nil)
		checkWriteOrder(t, o, []int64{41, -1})
	}
}

func checkWriteOrder(t *testing.T, o inventory.Order, remaining []int64) {
	t.Helper()
	want := httptest.NewRecorder()
	writeJSON(want, http.StatusCreated, orderBody(o, remaining))
	got := httptest.NewRecorder()
	writeOrder(got, http.StatusCreated, o, remaining)
	if got.Code != want.Code || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) || !reflect.DeepEqual(got.Header(), want.Header()) {
		t.Fatalf("writeOrder: %d %v %q\nwriteJSON: %d %v %q", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
	}
}

// appendPlace writes a place byte for byte as encoding/json does, in
// every status's shape, or says it cannot.
func TestAppendPlaceMatchesEncodingJSON(t *testing.T) {
	pos, ahead := int64(1234), int64(1233)
	until := time.Date(2026, 12, 1, 10, 2, 0, 500_000_000, time.UTC)
	joined := time.Date(2026, 12, 1, 9, 59, 59, 123_456_789, time.UTC)
	for _, p := range []placeJSON{
		{SaleID: "s1", Status: "drawing", PollAfterMs: 1500, JoinedAt: joined, InDraw: true},
		{SaleID: "s1", Status: "waiting", Position: &pos, Ahead: &ahead, EtaS: json.RawMessage("null"), PollAfterMs: 5000, JoinedAt: joined},
		{SaleID: "s1", Status: "waiting", Position: &pos, Ahead: &ahead, EtaS: json.RawMessage("37"), PollAfterMs: 18000, JoinedAt: joined},
		{SaleID: "a.b:c-d_e", Status: "admitted", PollAfterMs: 60000, JoinedAt: joined, InDraw: true,
			Admission: "eyJhIjoxfQ.c2lnbmF0dXJl", AdmittedUntil: &until},
		{SaleID: "s1", Status: "used", PollAfterMs: 10000, JoinedAt: joined, OrderID: "0123456789abcdef01234567"},
		{SaleID: "s1", Status: "lapsed", PollAfterMs: 10000, JoinedAt: time.Unix(0, 0).UTC()},
		{SaleID: "s1", Status: "sold_out", PollAfterMs: 10000, JoinedAt: joined},
		{SaleID: "s<1>", Status: "used", JoinedAt: joined, OrderID: "a&b"},
	} {
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		if got := placeBody(p); !bytes.Equal(got, want) {
			t.Errorf("placeBody:\n got %s\nwant %s", got, want)
		}
		if got, ok := appendPlace(nil, p); ok && !bytes.Equal(got, want) {
			t.Errorf("appendPlace says ok:\n got %s\nwant %s", got, want)
		}
	}
}
