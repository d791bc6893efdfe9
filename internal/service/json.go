package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// maxBody is the largest request body accepted.
const maxBody = 64 << 10

// decode reads a JSON body strictly: at most 64 KiB, one object, no unknown
// fields, integers where the contract says integers.
//
// encoding/json matches keys to fields in any case and lets a repeated key
// win; the contract's names are exact, so a second pass over the tokens
// refuses a key that is not exactly a field's name, or that repeats.
func decode(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return errInvalid(jsonProblem(err))
	}
	return decodeBody(body, dst)
}

// decodeBody is decode of a body already read.
func decodeBody(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return errInvalid(jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errInvalid("the body must hold exactly one JSON object")
	}
	if err := exactKeys(json.NewDecoder(bytes.NewReader(body)), reflect.TypeOf(dst), ""); err != nil {
		return errInvalid(err.Error())
	}
	return nil
}

// exactKeys walks one JSON value (already decoded once, so well-formed)
// against t: every key of an object decoded into a struct must be exactly
// one of its fields' JSON names, and no object may repeat a key. at is the
// path so far, for the message.
func exactKeys(dec *json.Decoder, t reflect.Type, at string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && reflect.PointerTo(t).Implements(unmarshaler) {
		t = nil // decodes itself: only repeats are checked
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if delim == '[' {
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := exactKeys(dec, elem, at+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		name := key
		if at != "" {
			name = at + "." + key
		}
		if seen[key] {
			return fmt.Errorf("repeated field %s", name)
		}
		seen[key] = true
		var next reflect.Type
		switch {
		case t != nil && t.Kind() == reflect.Struct:
			f, ok := fieldNamed(t, key)
			if !ok {
				return fmt.Errorf("unknown field %s", name)
			}
			next = f
		case t != nil && t.Kind() == reflect.Map:
			next = t.Elem()
		}
		if err := exactKeys(dec, next, name); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// fieldNamed is the type of t's field whose JSON name is exactly key.
func fieldNamed(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if inner, ok := fieldNamed(ft, key); ok {
					return inner, true
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f.Type, true
		}
	}
	return nil, false
}

func jsonProblem(err error) string {
	var (
		tooBig *http.MaxBytesError
		typ    *json.UnmarshalTypeError
		syn    *json.SyntaxError
	)
	switch {
	case errors.As(err, &tooBig):
		return "the body is larger than 64 KiB"
	case errors.As(err, &typ):
		if typ.Field != "" {
			return typ.Field + " must be " + kindOf(typ.Type.Kind().String())
		}
		return "the body must be a JSON object"
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "malformed JSON"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return "malformed JSON: " + err.Error()
}

func kindOf(k string) string {
	switch k {
	case "int64", "int", "int32":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "ptr":
		return "an object"
	}
	return "a " + k
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	jsonHeaders(w.Header())
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
