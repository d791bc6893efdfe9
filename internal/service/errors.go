package service

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/failover"
	"github.com/seckill/seckill/internal/inventory"
)

// apiError is every non-2xx answer: the status, the contract's code, a
// message for people, and the skus a sold_out or limit_exceeded names.
type apiError struct {
	Status     int
	Code       string
	Message    string
	SKUs       []string
	RetryAfter int // seconds, for 429 and 503
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errInvalid(msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_argument", Message: msg}
}

func errNotFound(msg string) *apiError {
	return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: msg}
}

var (
	errUnavailable     = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the inventory is unavailable; retry", RetryAfter: 1}
	errInternal        = &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
	errUnauthenticated = &apiError{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: "a valid bearer token is required"}
	errForbidden       = &apiError{Status: http.StatusForbidden, Code: "permission_denied", Message: "this token does not grant that"}
	errTokenDenied     = &apiError{Status: http.StatusForbidden, Code: "permission_denied", Message: "a valid, unused X-Purchase-Token for this sale is required"}
	// errTokensNeedRedis refuses a buy of a sale that requires purchase
	// tokens while the database sells: a token's single use is kept in Redis.
	errTokensNeedRedis = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 1,
		Message: "this sale requires purchase tokens, which are checked in redis; it does not sell while the database sells (degraded mode): retry when redis is back"}
)

// toAPI is the one table from errors to HTTP answers. Anything it does not
// know is an internal error: logged, and answered without details.
func toAPI(err error) *apiError {
	var (
		api      *apiError
		inv      *inventory.InvalidError
		notFound *inventory.NotFoundError
		soldOut  *inventory.SoldOutError
		limit    *inventory.LimitError
		inactive *inventory.NotActiveError
	)
	switch {
	case errors.As(err, &api):
		return api
	case errors.As(err, &inv):
		return errInvalid(inv.Field + " " + inv.Reason)
	case errors.As(err, &notFound):
		return errNotFound(notFound.Message())
	case errors.Is(err, inventory.ErrNotFound):
		return errNotFound("not found")
	case errors.Is(err, inventory.ErrExists):
		return &apiError{Status: http.StatusConflict, Code: "already_exists", Message: "a sale with this id exists"}
	case errors.As(err, &soldOut):
		return &apiError{Status: http.StatusConflict, Code: "sold_out", Message: "not enough stock", SKUs: soldOut.SKUs}
	case errors.As(err, &limit):
		return &apiError{Status: http.StatusConflict, Code: "limit_exceeded",
			Message: "the per-user limit is " + strconv.FormatInt(limit.Limit, 10), SKUs: limit.SKUs}
	case errors.Is(err, inventory.ErrAlreadyPaid), errors.Is(err, inventory.ErrOrderClosed):
		return toAPI(payError(err))
	case errors.Is(err, inventory.ErrTokenSpent):
		return errTokenDenied
	case errors.Is(err, inventory.ErrIdempotencyMismatch):
		return &apiError{Status: http.StatusUnprocessableEntity, Code: "idempotency_mismatch",
			Message: "this Idempotency-Key was used for a buy of other items; resend the same items, or use a new key"}
	case errors.As(err, &inactive):
		return &apiError{Status: http.StatusConflict, Code: "sale_not_active", Message: "the sale is " + string(inactive.Status)}
	case errors.Is(err, failover.ErrTokensNeedRedis):
		return errTokensNeedRedis
	case errors.Is(err, inventory.ErrUnavailable), errors.Is(err, inventory.ErrFenced), errors.Is(err, failover.ErrRedisRestarted),
		errors.Is(err, failover.ErrReplicaConnection), failover.RedisDown(err), isPoolBusy(err):
		return errUnavailable
	}
	return errInternal
}

// isPoolBusy: every connection of the client's pool stayed busy for its
// pool timeout, so the command was never sent. That says this process is
// short of connections, not that Redis is away: the request is answered
// 503 (nothing happened, retry), and nothing takes it for "Redis is down".
func isPoolBusy(err error) bool { return errors.Is(err, redis.ErrPoolTimeout) }

type errorBody struct {
	Error struct {
		Code    string   `json:"code"`
		Message string   `json:"message"`
		SKUs    []string `json:"skus,omitempty"`
	} `json:"error"`
	SKUs []string `json:"skus,omitempty"`
}

// writeError answers with err; internal errors are logged with the request.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	writeErrorTo(exchangeOf(w, r), log, err)
}

// writeErrorTo is writeError on any server's exchange.
func writeErrorTo(x exchange, log *slog.Logger, err error) {
	api := toAPI(err)
	if api.Status >= 500 {
		log.Error("request failed", "method", x.method(), "path", x.path(), "status", api.Status, "err", err)
	}
	var body errorBody
	body.Error.Code, body.Error.Message, body.Error.SKUs = api.Code, api.Message, api.SKUs
	body.SKUs = api.SKUs
	if api.RetryAfter > 0 {
		x.setHeader("Retry-After", strconv.Itoa(api.RetryAfter))
	}
	b, _ := json.Marshal(body)               // strings and slices of strings: cannot fail
	x.replyJSON(api.Status, append(b, '\n')) // as json.Encoder writes it
}
