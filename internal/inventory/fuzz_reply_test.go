package inventory

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzBuyReplies: whatever a buy.lua reply holds (lengths negative, zero,
// past the end, huge, not integers; codes not integers; left-over or
// missing outcomes), buyReplies either fails with ErrCorrupt or cuts it
// into exactly n outcomes, each led by an integer code, which laid back
// out after their lengths are the reply itself: no outcome is ever cut
// from another buy's part of the reply, nor is one left out.
func FuzzBuyReplies(f *testing.F) {
	f.Add([]byte{0, 1, 15, 3, 0, 7, 4}, uint8(2))
	f.Add([]byte{0, 255, 15, 1, 15}, uint8(2))
	f.Add([]byte{0, 2, 6, 128, 1, 8}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, n uint8) {
		// The first byte is the call's code (asReply has checked that the
		// reply is an array led by an integer); each other byte an
		// element: 128 a string, 129 an array, 130 nil, 250.. negative
		// integers, 200..249 huge ones, else the integer.
		if len(data) == 0 {
			return
		}
		reply := make([]any, len(data))
		reply[0] = int64(data[0])
		for i, c := range data {
			switch {
			case i == 0:
			case c == 128:
				reply[i] = "1"
			case c == 129:
				reply[i] = []any{int64(0)}
			case c == 130:
				reply[i] = nil
			case c >= 250:
				reply[i] = -int64(c - 249)
			case c >= 200:
				reply[i] = int64(1)<<62 + int64(c)
			default:
				reply[i] = int64(c)
			}
		}
		out, err := buyReplies(reply, nil, int(n))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("buyReplies(%v, %d): %v, want ErrCorrupt", reply, n, err)
			}
			return
		}
		if len(out) != int(n) {
			t.Fatalf("buyReplies(%v, %d): %d outcomes", reply, n, len(out))
		}
		back := []any{int64(codeOK)}
		for _, o := range out {
			if len(o) == 0 {
				t.Fatalf("buyReplies(%v, %d): an empty outcome", reply, n)
			}
			if _, ok := o[0].(int64); !ok {
				t.Fatalf("buyReplies(%v, %d): outcome %v led by no code", reply, n, o)
			}
			back = append(back, int64(len(o)))
			back = append(back, o...)
		}
		if !reflect.DeepEqual(back, reply) {
			t.Fatalf("buyReplies(%v, %d) = %v: not the reply cut in order", reply, n, out)
		}
	})
}
