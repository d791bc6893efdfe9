package service_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIMatchesRoutes: /openapi.json names exactly the routes the
// service registers, every reference in it resolves, and every operation
// has an id and a success answer.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	a := startApp(t, stacks[1].start(t))
	r := a.call("GET", "/openapi.json", "", nil)
	mustStatus(t, r, http.StatusOK)
	var doc struct {
		OpenAPI    string                               `json:"openapi"`
		Paths      map[string]map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi = %q", doc.OpenAPI)
	}
	var documented []string
	ids := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
			id, _ := op["operationId"].(string)
			if id == "" || ids[id] {
				t.Errorf("%s %s: operationId %q missing or repeated", method, path, id)
			}
			ids[id] = true
			responses, _ := op["responses"].(map[string]any)
			if !slices.ContainsFunc(mapKeys(responses), func(code string) bool { return strings.HasPrefix(code, "2") }) {
				t.Errorf("%s %s: no 2xx response", method, path)
			}
		}
	}
	slices.Sort(documented)
	if registered := a.svc.Endpoints(); !slices.Equal(documented, registered) {
		t.Errorf("document and routes differ:\n documented %v\n registered %v", documented, registered)
	}
	for _, ref := range refs(r.body) {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		if _, ok := doc.Components.Schemas[name]; !ok || name == ref {
			t.Errorf("unresolved $ref %q", ref)
		}
	}
}

func mapKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// refs collects every "$ref" value of a JSON document.
func refs(raw []byte) []string {
	var v any
	_ = json.Unmarshal(raw, &v)
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "$ref" {
					out = append(out, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}
