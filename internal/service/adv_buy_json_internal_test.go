package service

import "testing"

// TestAdvBuyBodyTrailingComma: a trailing comma inside an item object is
// malformed JSON; the fast reader must not accept what decode refuses.
func TestAdvBuyBodyTrailingComma(t *testing.T) {
	for _, body := range []string{
		`{"items":[{"sku":"A","qty":1,}]}`,
		`{"items":[{"qty":1,"sku":"A",}]}`,
		`{"items":[{"sku":"A","qty":1 , }]}`,
	} {
		if _, err := slowBuyLines([]byte(body)); err == nil {
			t.Fatalf("decode accepts %s", body)
		}
		if lines, err := buyLines([]byte(body)); err == nil {
			t.Errorf("buyLines(%s) = %+v, nil; want the 400 decode gives", body, lines)
		}
	}
}
