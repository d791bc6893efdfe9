package service

import (
	"errors"
	"strconv"
)

// A small reader of JSON text for the hot path's two formats (a buyer
// token's header and claims, a buy's body): it walks the bytes once,
// allocates nothing, and knows RFC 8259's grammar. It gives the text of a
// value, not the value: callers read the few they need.

type jsonKind uint8

const (
	jsonInvalid jsonKind = iota
	jsonString
	jsonNumber
	jsonBool
	jsonNull
	jsonObject
	jsonArray
)

// jsonValue is one value as it is spelled: a string's text without the
// quotes (escaped says it holds a backslash), a number's text, or the
// whole text of an object or array (strings says an array holds only
// strings).
type jsonValue struct {
	kind    jsonKind
	text    []byte
	escaped bool
	strings bool
}

// maxJSONDepth bounds nesting; maxJSONMembers the keys of one object (the
// repeat check compares each with those before it).
const (
	maxJSONDepth   = 16
	maxJSONMembers = 64
)

type jsonScanner struct {
	b []byte
	i int
	// floats: every number must be one a float64 holds (encoding/json's
	// reading of a number into an interface, which a JWT library makes of
	// a token's header and claims: it refuses the token otherwise).
	floats bool
}

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek is the next byte after whitespace, 0 at the end.
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// consume takes c, the next byte after whitespace.
func (s *jsonScanner) consume(c byte) bool {
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// str reads a string; s.b[s.i] is its opening quote.
func (s *jsonScanner) str() (text []byte, escaped, ok bool) {
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			text = s.b[start:s.i]
			s.i++
			return text, escaped, true
		case c < 0x20:
			return nil, false, false
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return nil, false, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return nil, false, false
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return nil, false, false
					}
				}
				s.i += 6
			default:
				return nil, false, false
			}
		default:
			s.i++
		}
	}
	return nil, false, false
}

// num reads a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScanner) num() ([]byte, bool) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	whole := 1
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		whole = s.digits()
	default:
		return nil, false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return nil, false
		}
	}
	exponent := false
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		exponent = true
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return nil, false
		}
	}
	text := s.b[start:s.i]
	// Without an exponent, 308 digits before the point stay below
	// float64's largest (1.8e308): only the rest need parsing.
	if s.floats && (exponent || whole > 308) {
		if _, err := strconv.ParseFloat(string(text), 64); err != nil {
			return nil, false
		}
	}
	return text, true
}

func (s *jsonScanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// literal reads true, false or null.
func (s *jsonScanner) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// value reads any value after whitespace.
func (s *jsonScanner) value(depth int) (jsonValue, bool) {
	var v jsonValue
	switch c := s.peek(); {
	case c == '"':
		t, esc, ok := s.str()
		return jsonValue{kind: jsonString, text: t, escaped: esc}, ok
	case c == '-' || '0' <= c && c <= '9':
		t, ok := s.num()
		return jsonValue{kind: jsonNumber, text: t}, ok
	case c == 't':
		return jsonValue{kind: jsonBool}, s.literal("true")
	case c == 'f':
		return jsonValue{kind: jsonBool}, s.literal("false")
	case c == 'n':
		return jsonValue{kind: jsonNull}, s.literal("null")
	case c == '[':
		if depth >= maxJSONDepth {
			return v, false
		}
		start := s.i
		s.i++
		v = jsonValue{kind: jsonArray, strings: true}
		if !s.consume(']') {
			for {
				e, ok := s.value(depth + 1)
				if !ok {
					return v, false
				}
				v.strings = v.strings && e.kind == jsonString
				if s.consume(']') {
					break
				}
				if !s.consume(',') {
					return v, false
				}
			}
		}
		v.text = s.b[start:s.i]
		return v, true
	case c == '{':
		if depth >= maxJSONDepth {
			return v, false
		}
		start := s.i
		if s.object(depth, nil) != nil {
			return v, false
		}
		return jsonValue{kind: jsonObject, text: s.b[start:s.i]}, true
	}
	return v, false
}

// object reads an object after whitespace, calling member (if not nil) for
// each key and value in order. A key with an escape, a repeated key or
// more than maxJSONMembers keys is errJWTMalformed's kind of refusal:
// errJSONShape; member's error stops the walk and is returned.
func (s *jsonScanner) object(depth int, member func(key []byte, val jsonValue) error) error {
	if !s.consume('{') {
		return errJSONShape
	}
	if s.consume('}') {
		return nil
	}
	var keys [maxJSONMembers][]byte
	for n := 0; ; n++ {
		if n == maxJSONMembers || s.peek() != '"' {
			return errJSONShape
		}
		key, esc, ok := s.str()
		if !ok || esc {
			return errJSONShape
		}
		for _, k := range keys[:n] {
			if string(k) == string(key) {
				return errJSONShape
			}
		}
		keys[n] = key
		if !s.consume(':') {
			return errJSONShape
		}
		val, ok := s.value(depth + 1)
		if !ok {
			return errJSONShape
		}
		if member != nil {
			if err := member(key, val); err != nil {
				return err
			}
		}
		if s.consume('}') {
			return nil
		}
		if !s.consume(',') {
			return errJSONShape
		}
	}
}

// eachMember reads b as exactly one object (whitespace around it
// allowed), every number in it, however deep, one a float64 holds.
func eachMember(b []byte, member func(key []byte, val jsonValue) error) error {
	s := jsonScanner{b: b, floats: true}
	if err := s.object(0, member); err != nil {
		return err
	}
	if s.ws(); s.i != len(s.b) {
		return errJSONShape
	}
	return nil
}

// errJSONShape: the text is not JSON, or not in the shape the reader takes.
var errJSONShape = errors.New("json: not in the expected shape")
