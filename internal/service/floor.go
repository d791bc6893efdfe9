package service

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
)

// The floor: what no buy can cost less than, the reference the service's
// CPU per buy is a ratio of (`seckill bench --cost`, docs/performance.md).
// Every buy is an HTTP request whose buyer's token is checked and whose
// reply is a small JSON body; the floor does that and nothing else — no
// routing, no body read, no Redis, no database, no log, no request id —
// on the service's own fasthttp server options (fastServer) and its own
// token check (auth.buyerOf, hs256).

// floorReply is the floor's answer to every request with a valid buyer's
// token: an order of one line as a buy answers it, of about its size.
var floorReply = []byte(`{"order_id":"floor.00000000000000000000000000","sale_id":"floor","user_id":"floor",` +
	`"status":"pending","items":[{"sku":"A","qty":1,"remaining":999999999}],"created_at":"2026-01-01T00:00:00.000000000Z"}` + "\n")

// NewFloorServer is the floor's HTTP server for buyers' tokens signed
// with jwtSecret: to any request, whatever its method and path, it
// answers 201 and a fixed order-shaped JSON body when its Authorization
// header holds a valid buyer's token (as a buy's is checked), and the
// service's 401 otherwise. It is the benchmark's reference, not a part of
// the service.
func NewFloorServer(jwtSecret string) *fasthttp.Server {
	a := &auth{jwt: newHS256([]byte(jwtSecret)), now: time.Now}
	return fastServer(floorHandler(a), discardServerLog{})
}

// floorHandler is the floor's request handler.
func floorHandler(a *auth) fasthttp.RequestHandler {
	quiet := slog.New(slog.DiscardHandler) // a 401 logs nothing anyway
	return func(c *fasthttp.RequestCtx) {
		x := &fastExchange{c: c}
		authorization, _ := x.header("Authorization")
		if _, err := a.buyerOf(authorization); err != nil {
			writeErrorTo(x, quiet, err)
			return
		}
		x.replyJSON(http.StatusCreated, floorReply)
	}
}

// discardServerLog is the floor server's log: none.
type discardServerLog struct{}

func (discardServerLog) Printf(string, ...any) {}
