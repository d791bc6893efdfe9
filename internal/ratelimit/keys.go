package ratelimit

import "strconv"

// Every Redis key the limiter touches is built here. All keys of one caller
// key share the hash tag {<prefix>:rl:<key>}, so they live in one Redis
// Cluster slot; each script touches exactly one key. The key's name also
// carries the limit's parameters, so two limits on one caller key never
// share state, and changing a limit starts afresh.
//
//	{p:rl:k}:fw:<rate>:<period µs>:<window>   string  hits in window number <window>
//	                                                   (floor(now µs / period µs)); expires
//	                                                   a period after its first hit; the
//	                                                   script appends <window> (it alone
//	                                                   reads the time), under the same tag
//	{p:rl:k}:sw:<rate>:<period µs>            zset    one member per hit counted, scored by
//	                                                   its time in µs; expires a period after
//	                                                   the last hit
//	{p:rl:k}:gcra:<rate>:<period µs>:<burst>  string  "<TAT µs>:<fraction>", the theoretical
//	                                                   arrival time; expires when it passes
func (l *Limiter) tag(key string) string { return "{" + l.prefix + ":rl:" + key + "}" }

// fixedKeys is the start of the fixed windows' counters: fixed.lua appends
// the window's number, which only it knows (it reads the time).
func (l *Limiter) fixedKeys(key string, p params) string {
	return l.tag(key) + ":fw:" + strconv.FormatInt(p.rate, 10) + ":" + strconv.FormatInt(p.periodUS, 10) + ":"
}

func (l *Limiter) slidingKey(key string, p params) string {
	return l.tag(key) + ":sw:" + strconv.FormatInt(p.rate, 10) + ":" + strconv.FormatInt(p.periodUS, 10)
}

func (l *Limiter) gcraKey(key string, p params) string {
	return l.tag(key) + ":gcra:" + strconv.FormatInt(p.rate, 10) + ":" + strconv.FormatInt(p.periodUS, 10) +
		":" + strconv.FormatInt(p.burst, 10)
}
