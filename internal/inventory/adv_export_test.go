package inventory

// ThrottleWindow is throttleWindow, for the adversarial tests: the span in
// ms of the hashes buy.lua keeps throttle t's states in.
func ThrottleWindow(t Throttle) int64 {
	b, err := t.bucket()
	if err != nil {
		panic(err)
	}
	return throttleWindow(b)
}

// SaleTableField, SaleTableValue are saleTableField and saleTableValue,
// for the adversarial tests of the field (adv_table_test.go).
const (
	SaleTableField = saleTableField
	SaleTableValue = saleTableValue
)
