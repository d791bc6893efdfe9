package service

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// maxBody is the largest request body accepted.
const maxBody = 64 << 10

// decode reads a JSON body strictly: at most 64 KiB, one object, no unknown
// fields, integers where the contract says integers.
func decode(w http.ResponseWriter, r *http.Request, dst any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return errInvalid(jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errInvalid("the body must hold exactly one JSON object")
	}
	return nil
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
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
