package service

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// apiDocPath is the API's page for people; openAPI (openapi.json) is the
// same API for programs, as GET /openapi.json serves it.
const apiDocPath = "../../docs/api.md"

// planned is what docs/api.md names that the service does not serve yet:
// a planned route, code or field is named by the page and must not be
// served (the test says so when it is: it comes out of these lists then).
// Nothing is planned today.
var planned = struct{ routes, codes, fields []string }{}

// TestAPIDocMatchesOpenAPI: docs/api.md and /openapi.json name the same
// routes, the same statuses for each route, the same error codes (each
// with the status the document gives it) and the same JSON fields, but
// for the planned ones above.
func TestAPIDocMatchesOpenAPI(t *testing.T) {
	raw, err := os.ReadFile(apiDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := parseAPIDoc(t, string(raw))
	spec := parseOpenAPI(t, openAPI)

	// Routes and their statuses.
	for _, r := range sortedKeys(spec.routes) {
		got, ok := doc.table[r]
		switch {
		case !ok:
			t.Errorf("%s is served (openapi.json) but not in docs/api.md's routes at a glance", r)
		case !slices.Equal(got, spec.routes[r]):
			t.Errorf("%s: docs/api.md gives statuses %v, openapi.json %v", r, got, spec.routes[r])
		}
	}
	for _, r := range sortedKeys(doc.table) {
		if _, ok := spec.routes[r]; !ok {
			t.Errorf("%s is in docs/api.md's routes at a glance but not served (openapi.json)", r)
		}
	}
	for _, r := range doc.mentioned {
		if _, ok := doc.table[r]; !ok && !slices.Contains(planned.routes, r) {
			t.Errorf("docs/api.md names %s, which is neither in its routes at a glance nor planned", r)
		}
	}

	// Error codes, and the status of each.
	compareNames(t, "error code", sortedKeys(doc.codes), spec.codes, planned.codes)
	for _, p := range spec.codePairs {
		if st, ok := doc.codes[p.code]; ok && !slices.Contains(st, p.status) {
			t.Errorf("openapi.json answers %s with %s; docs/api.md gives it %v", p.code, p.status, st)
		}
	}
	for code, st := range doc.codes {
		if len(st) != 1 {
			t.Errorf("docs/api.md gives the error code %s several statuses: %v", code, st)
		}
	}

	// JSON fields.
	compareNames(t, "JSON field", doc.fields, spec.fields, planned.fields)

	// The planned names are named by the document and not served yet.
	for _, r := range planned.routes {
		if !slices.Contains(doc.mentioned, r) {
			t.Errorf("planned route %s is not in docs/api.md: remove it from planned", r)
		}
		if _, ok := spec.routes[r]; ok {
			t.Errorf("planned route %s is served now: remove it from planned, list it in docs/api.md's routes at a glance", r)
		}
	}
}

// compareNames reports names one side has and the other does not; a
// planned name may be in the document alone, and must not be served.
func compareNames(t *testing.T, what string, inDoc, inSpec, plannedNames []string) {
	t.Helper()
	for _, n := range inSpec {
		if slices.Contains(plannedNames, n) {
			t.Errorf("planned %s %s is served now (openapi.json): remove it from planned", what, n)
		} else if !slices.Contains(inDoc, n) {
			t.Errorf("%s %s is in openapi.json but not in docs/api.md", what, n)
		}
	}
	for _, n := range inDoc {
		if !slices.Contains(inSpec, n) && !slices.Contains(plannedNames, n) {
			t.Errorf("%s %s is in docs/api.md but not in openapi.json (nor planned)", what, n)
		}
	}
	for _, n := range plannedNames {
		if !slices.Contains(inDoc, n) {
			t.Errorf("planned %s %s is not in docs/api.md: remove it from planned", what, n)
		}
	}
}

// apiDoc is what docs/api.md names.
type apiDoc struct {
	table     map[string][]string // "METHOD /path/{}" of the routes at a glance -> its statuses, sorted
	mentioned []string            // every "METHOD /path/{}" the page names in code, sorted, once each
	codes     map[string][]string // error code -> the statuses the page gives it
	fields    []string            // JSON field names, sorted
}

var (
	// a route in code: `GET /v1/sales/{sale}`
	docRouteRe = regexp.MustCompile("`(GET|POST|PUT|PATCH|DELETE) (/[^`\\s]*)`")
	// a row of the routes at a glance: | `GET /path` | who | success | errors |
	docRowRe = regexp.MustCompile("^\\|\\s*`(GET|POST|PUT|PATCH|DELETE) (/[^`\\s]*)`\\s*\\|[^|]*\\|([^|]*)\\|([^|]*)\\|\\s*$")
	// an error code after its status: 409 `sold_out`, or | 409 | `sold_out` |
	docCodeRe = regexp.MustCompile("\\b([45][0-9][0-9])[ |]+`([a-z][a-z_]*)`")
	// a field: "name": in JSON, or `"name"` on its own
	docFieldRe = regexp.MustCompile("\"([a-z][a-z0-9_]*)\"\\s*:|`\"([a-z][a-z0-9_]*)\"`")
	statusRe   = regexp.MustCompile(`\b[1-5][0-9][0-9]\b`)
	paramRe    = regexp.MustCompile(`\{[^}]*\}`)
)

func parseAPIDoc(t *testing.T, text string) apiDoc {
	t.Helper()
	doc := apiDoc{table: map[string][]string{}, codes: map[string][]string{}}
	inTable := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "## ") {
			inTable = strings.TrimPrefix(line, "## ") == "Routes at a glance"
			continue
		}
		if !inTable {
			continue
		}
		if m := docRowRe.FindStringSubmatch(line); m != nil {
			r := routeKey(m[1], m[2])
			if _, dup := doc.table[r]; dup {
				t.Errorf("docs/api.md lists %s twice in its routes at a glance", r)
			}
			doc.table[r] = sortedSet(statusRe.FindAllString(m[3]+" "+m[4], -1))
		}
	}
	if len(doc.table) == 0 {
		t.Fatal(`docs/api.md has no "## Routes at a glance" table`)
	}
	for _, m := range docRouteRe.FindAllStringSubmatch(text, -1) {
		doc.mentioned = append(doc.mentioned, routeKey(m[1], m[2]))
	}
	doc.mentioned = sortedSet(doc.mentioned)
	for _, m := range docCodeRe.FindAllStringSubmatch(text, -1) {
		if !slices.Contains(doc.codes[m[2]], m[1]) {
			doc.codes[m[2]] = append(doc.codes[m[2]], m[1])
		}
	}
	for _, m := range docFieldRe.FindAllStringSubmatch(text, -1) {
		doc.fields = append(doc.fields, m[1]+m[2])
	}
	doc.fields = sortedSet(doc.fields)
	return doc
}

// routeKey is "METHOD /path" with every parameter written {}: the page
// and the document may name a parameter differently ({sale}, {id}).
func routeKey(method, path string) string {
	return method + " " + paramRe.ReplaceAllString(path, "{}")
}

// openAPIDoc is what openapi.json names.
type openAPIDoc struct {
	routes    map[string][]string // "METHOD /path/{}" -> its response statuses, sorted
	codes     []string            // the error codes (the Error schema's enum), sorted
	codePairs []codePair          // each error code a response's description names, with the response's status
	fields    []string            // every property name of every schema, sorted
}

type codePair struct{ status, code string }

func parseOpenAPI(t *testing.T, raw []byte) openAPIDoc {
	t.Helper()
	var spec struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct{ Description string }
		} `json:"paths"`
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	out := openAPIDoc{routes: map[string][]string{}, codes: sortedSet(spec.Components.Schemas.Error.Properties.Error.Properties.Code.Enum)}
	if len(out.codes) == 0 {
		t.Fatal("openapi.json: no error codes in components.schemas.Error")
	}
	for path, ops := range spec.Paths {
		for method, op := range ops {
			var statuses []string
			for status, resp := range op.Responses {
				statuses = append(statuses, status)
				for _, code := range out.codes {
					if regexp.MustCompile(`\b` + code + `\b`).MatchString(resp.Description) {
						out.codePairs = append(out.codePairs, codePair{status, code})
					}
				}
			}
			out.routes[routeKey(strings.ToUpper(method), path)] = sortedSet(statuses)
		}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if props, ok := e.(map[string]any); ok && k == "properties" {
					for name := range props {
						out.fields = append(out.fields, name)
					}
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
	out.fields = sortedSet(out.fields)
	return out
}

func sortedSet(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
