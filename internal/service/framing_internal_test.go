package service

import (
	"fmt"
	"strings"
	"testing"
)

// TestFramingConnFollowsRequests: the net/http connection's reader of
// header blocks, fed in pieces of every size: a body that looks like
// headers is passed by its Content-Length, not read as a block; the
// verdict is clear until the block that breaks the rule ends, lost at a
// chunked body's block, and a long header line is no problem.
func TestFramingConnFollowsRequests(t *testing.T) {
	looksLikeHeaders := "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
	plain := fmt.Sprintf("POST /a HTTP/1.1\r\nHost: x\r\nX-Long: %s\r\ncontent-length : %d\r\n\r\n%s",
		strings.Repeat("y", 300), len(looksLikeHeaders), looksLikeHeaders)
	get := "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, c := range []struct {
		name, last string
		want       int32
	}{
		{"length and chunked", "POST /c HTTP/1.1\nHost: x\nContent-Length: 3\nTransfer-Encoding: chunked\n\n0\r\n\r\n", framingAmbiguous},
		{"folded chunked", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n\tchunked\r\n\r\n0\r\n\r\n", framingAmbiguous},
		{"a fold elsewhere", "POST /c HTTP/1.1\r\nX-A: 1\r\n 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", framingLost},
		{"chunked", "POST /c HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", framingLost},
		{"a length that is not one", "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n12", framingLost},
		{"plain", plain, framingClear},
	} {
		stream := plain + get + c.last + get
		// The last block ends at the '\n' of its blank line.
		end := strings.Index(c.last, "\n\n")
		if end < 0 {
			end = strings.Index(c.last, "\r\n\r\n") + 2
		}
		end += len(plain) + len(get) + 1
		for size := 1; size <= len(stream); size++ {
			var fc framingConn
			for i := 0; i < len(stream); i += size {
				if i <= end && fc.verdict.Load() != framingClear {
					t.Fatalf("%s, pieces of %d: verdict %d after %d bytes, before the block's end at %d", c.name, size, fc.verdict.Load(), i, end)
				}
				fc.scan([]byte(stream[i:min(i+size, len(stream))]))
			}
			if got := fc.verdict.Load(); got != c.want {
				t.Fatalf("%s, pieces of %d: verdict %d, want %d", c.name, size, got, c.want)
			}
		}
	}
}
