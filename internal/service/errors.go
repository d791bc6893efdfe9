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
	// Kind is the sentinel of package inventory the answer matches
	// (errors.Is), for the refusals a verb returns as they are answered
	// (verbs.go): ErrInvalid, ErrNotFound, ErrUnavailable, ...; nil: none.
	Kind error
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// Is reports whether target is e's Kind.
func (e *apiError) Is(target error) bool { return e.Kind != nil && target == e.Kind }

func errInvalid(msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_argument", Message: msg, Kind: inventory.ErrInvalid}
}

func errNotFound(msg string) *apiError {
	return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: msg, Kind: inventory.ErrNotFound}
}

var (
	errUnavailable = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the inventory is unavailable; retry", RetryAfter: 1,
		Kind: inventory.ErrUnavailable}
	errInternal        = &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
	errUnauthenticated = &apiError{Status: http.StatusUnauthorized, Code: "unauthenticated", Message: "a valid bearer token is required"}
	errForbidden       = &apiError{Status: http.StatusForbidden, Code: "permission_denied", Message: "this token does not grant that"}
	errTokenDenied     = &apiError{Status: http.StatusForbidden, Code: "permission_denied", Message: "a valid, unused X-Purchase-Token for this sale is required",
		Kind: inventory.ErrTokenRequired}
	// errTokensNeedRedis refuses a buy of a sale that requires purchase
	// tokens while the database sells: a token's single use is kept in Redis.
	errTokensNeedRedis = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 1,
		Message: "this sale requires purchase tokens, which are checked in redis; it does not sell while the database sells (degraded mode): retry when redis is back",
		Kind:    inventory.ErrUnavailable}
)

// toAPI is the one table from errors to HTTP answers. Anything it does not
// know is an internal error: logged, and answered without details.
func toAPI(err error) *apiError {
	// A refusal by one of the service's rate limits (limits.go). (AsType:
	// its variable costs no allocation per answer, as errors.As's do.)
	if limited, ok := errors.AsType[*limitError](err); ok {
		return &limited.answer
	}
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
	case errors.Is(err, inventory.ErrNoPayment): // an InvalidError, answered in words of its own
		return errInvalid("this order's sale has no payment step")
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
	case errors.Is(err, inventory.ErrAlreadyPaid):
		return errAlreadyPaid
	case errors.Is(err, inventory.ErrOrderClosed):
		return errOrderClosed
	case errors.Is(err, inventory.ErrTokenSpent), errors.Is(err, inventory.ErrTokenRequired):
		return errTokenDenied
	case errors.Is(err, inventory.ErrIdempotencyMismatch):
		return &apiError{Status: http.StatusUnprocessableEntity, Code: "idempotency_mismatch",
			Message: "this Idempotency-Key was used for a buy of other items; resend the same items, or use a new key"}
	case errors.As(err, &inactive):
		return &apiError{Status: http.StatusConflict, Code: "sale_not_active", Message: "the sale is " + string(inactive.Status)}
	case errors.Is(err, failover.ErrTokensNeedRedis):
		return errTokensNeedRedis
	case retryLater(err):
		return errUnavailable
	}
	return errInternal
}

// retryLater reports whether err says the inventory cannot serve the call
// now and the caller should retry: Redis and the database both unable to
// sell, a sale fenced off, Redis unreachable or refusing a connection
// during a failover, a pool with no connection free. The HTTP answer is 503
// with Retry-After; a verb's error matches inventory.ErrUnavailable
// (verbError).
func retryLater(err error) bool {
	return errors.Is(err, inventory.ErrUnavailable) || errors.Is(err, failover.ErrTokensNeedRedis) ||
		errors.Is(err, inventory.ErrFenced) || errors.Is(err, failover.ErrRedisRestarted) ||
		errors.Is(err, failover.ErrReplicaConnection) || failover.RedisDown(err) || isPoolBusy(err)
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
