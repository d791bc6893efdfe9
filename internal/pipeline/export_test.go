package pipeline

// SetLagRead sets how many undelivered entries ReadLags reads at most
// when Redis cannot tell the lag, until the returned func restores it.
func SetLagRead(n int64) (restore func()) {
	old := lagRead
	lagRead = n
	return func() { lagRead = old }
}
