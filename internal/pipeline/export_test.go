package pipeline

// SetLagRead sets how many undelivered entries ReadLags reads at most
// when Redis cannot tell the lag, until the returned func restores it.
func SetLagRead(n int64) (restore func()) {
	old := lagRead
	lagRead = n
	return func() { lagRead = old }
}

// SetQuietAll sets how many quiet sales a reader reads in every round at
// most, until the returned func restores it.
func SetQuietAll(n int) (restore func()) {
	old := quietAll
	quietAll = n
	return func() { quietAll = old }
}
