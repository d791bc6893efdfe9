package inventory

import "github.com/seckill/seckill/ratelimit"

// ThrottleWindow is throttleWindow, for the adversarial tests: the span in
// ms of the hashes buy.lua keeps bucket b's throttle states in.
func ThrottleWindow(b ratelimit.Bucket) int64 { return throttleWindow(b) }
