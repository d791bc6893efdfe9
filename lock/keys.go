package lock

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Every key of one lock shares the hash tag {<prefix>:<name>}, so the
// scripts, which touch the lock and its fence counter together, also run on
// Redis Cluster. The fence counter has no TTL: it must outlive every holder,
// or fences would start again at 1.
//
//	{<prefix>:<name>}:lock      owner token, PX = lock TTL
//	{<prefix>:<name>}:fence     last fence issued (INCR counter, never expires)
//	{<guard prefix>:<resource>}:guard   hash {fence, value} kept by a Guard

const (
	// DefaultPrefix is the key prefix of a Locker whose Options.Prefix is empty.
	DefaultPrefix = "lock"
	// DefaultGuardPrefix is the key prefix of a Guard made with an empty prefix.
	DefaultGuardPrefix = "fenced"

	maxNameLen = 200
)

// lockKeys are the two keys of one lock, in the order the scripts take them.
type lockKeys [2]string

func keysFor(prefix, name string) lockKeys {
	tag := "{" + prefix + ":" + name + "}"
	return lockKeys{tag + ":lock", tag + ":fence"}
}

func (k lockKeys) lock() string    { return k[0] }
func (k lockKeys) slice() []string { return k[:] }

func guardKey(prefix, resource string) string {
	return "{" + prefix + ":" + resource + "}:guard"
}

// checkName reports why s cannot be a lock name, resource name or key prefix:
// it must be 1 to 200 bytes of printable UTF-8 without spaces or braces
// (braces would break the hash tag).
func checkName(what, s string) error {
	switch {
	case s == "":
		return invalid("empty %s", what)
	case len(s) > maxNameLen:
		return invalid("%s is %d bytes long, at most %d allowed", what, len(s), maxNameLen)
	case !utf8.ValidString(s):
		return invalid("%s %q is not valid UTF-8", what, s)
	case strings.ContainsAny(s, "{}"):
		return invalid("%s %q contains a brace", what, s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return invalid("%s %q contains a space or an unprintable character", what, s)
		}
	}
	return nil
}
