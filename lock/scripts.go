package lock

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/luascript"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed fencedset.lua
	fencedSetSrc string

	acquireScript   = luascript.New("acquire", acquireSrc)
	extendScript    = luascript.New("extend", extendSrc)
	releaseScript   = luascript.New("release", releaseSrc)
	fencedSetScript = luascript.New("fencedset", fencedSetSrc)
)

// Outcome codes, the first element of every script reply. They never leave
// the package: run decodes them into a reply, the callers into errors.
const (
	codeRefused = 0 // acquire: held by another owner; extend, release: not the owner
	codeOK      = 1
	codeCorrupt = 2 // the fence counter is not an integer
)

// reply is one node's answer to one script call.
type reply struct {
	node int
	code int64
	num  int64 // acquire: the fence if OK, the holder's PTTL if refused
	err  error // *NodeError; code is then meaningless
}

func (r reply) ok() bool      { return r.err == nil && r.code == codeOK }
func (r reply) refused() bool { return r.err == nil && r.code == codeRefused }

// tally sorts the replies of a fan-out: confirmed, refused, failed.
type tally struct {
	ok      int
	refused []reply
	errs    []error
}

func (t *tally) add(r reply) {
	switch {
	case r.ok():
		t.ok++
	case r.refused():
		t.refused = append(t.refused, r)
	default:
		t.errs = append(t.errs, r.err)
	}
}

// run executes s on client c (node number node) and decodes the reply
// {code [, number]}. Anything else, and any Redis or network error, is a
// *NodeError in reply.err.
func run(ctx context.Context, c redis.Scripter, node int, s *luascript.Script, keys []string, args ...any) reply {
	r := reply{node: node}
	res, _, err := luascript.Run(ctx, c, s, keys, args...)
	if err != nil {
		r.err = &NodeError{Node: node, Err: fmt.Errorf("%s script: %w", s.Name, err)}
		return r
	}
	arr, _ := res.([]any)
	var code, num int64
	ok := len(arr) >= 1
	if ok {
		code, ok = arr[0].(int64)
	}
	if ok && len(arr) >= 2 {
		num, ok = arr[1].(int64)
	}
	switch {
	case !ok:
		r.err = &NodeError{Node: node, Err: fmt.Errorf("%s script: unexpected reply %v", s.Name, res)}
	case code == codeCorrupt:
		r.err = &NodeError{Node: node, Err: fmt.Errorf("%s script: fence counter %s does not hold an integer", s.Name, keys[len(keys)-1])}
	default:
		r.code, r.num = code, num
	}
	return r
}
