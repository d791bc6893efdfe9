package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
)

func benchRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"bench"}, args...), func(string) string { return "" }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestBenchUsage(t *testing.T) {
	cases := map[string][]string{
		"unknown flag":        {"--bogus"},
		"unknown approach":    {"--only", "redis-naive,redis-magic"},
		"no clients":          {"--concurrency", "0"},
		"negative stock":      {"--stock", "-1"},
		"no duration":         {"--duration", "0s"},
		"png chart":           {"--chart", "out.png"},
		"chart without .svg":  {"--chart", "out.txt"},
		"stray argument":      {"now"},
		"bad duration syntax": {"--duration", "soon"},
	}
	for name, args := range cases {
		code, out, errOut := benchRun(t, args...)
		if code != 2 || out != "" || errOut == "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
	}
	_, _, errOut := benchRun(t, "--only", "redis-magic")
	if !strings.Contains(errOut, `unknown approach "redis-magic"`) || !strings.Contains(errOut, "redis-lua-evalsha") {
		t.Errorf("unknown approach: %q", errOut)
	}
	_, _, errOut = benchRun(t, "--chart", "x.png")
	if !strings.Contains(errOut, "SVG only") {
		t.Errorf("png: %q", errOut)
	}
	var help bytes.Buffer
	if code := run(context.Background(), []string{"help"}, nil, &help, io.Discard); code != 0 || !strings.Contains(help.String(), "  bench ") {
		t.Errorf("usage does not list bench: %q", help.String())
	}
}

// TestBenchJSONAndChart runs three approaches, small, on the machine's
// servers: --only keeps exactly those, in run order; the JSON has the
// documented fields; the chart has a bar for each.
func TestBenchJSONAndChart(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "bench.svg")
	code, out, errOut := benchRun(t, "--json", "--only", "redis-naive,db-conditional-update,redis-lua-evalsha",
		"--stock", "40", "--concurrency", "8", "--redis", redistest.URL(), "--db", dbtest.ServerURL(), "--chart", chart)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var doc struct {
		Machine struct {
			GOOS     string `json:"goos"`
			CPUs     int    `json:"cpus"`
			Redis    string `json:"redis"`
			Database string `json:"database"`
		} `json:"machine"`
		Approaches []struct {
			Name     string   `json:"name"`
			OpsPerS  float64  `json:"ops_per_s"`
			P50Ms    float64  `json:"p50_ms"`
			P99Ms    float64  `json:"p99_ms"`
			Errors   *int64   `json:"errors"`
			Oversold *int64   `json:"oversold"`
			Sold     int64    `json:"sold"`
			Stock    int64    `json:"stock"`
			Ratio    *float64 `json:"ratio_to_best_db"`
		} `json:"approaches"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Machine.GOOS == "" || doc.Machine.CPUs < 1 || !strings.HasPrefix(doc.Machine.Redis, "Redis ") ||
		!strings.HasPrefix(doc.Machine.Database, "PostgreSQL ") {
		t.Errorf("machine %+v", doc.Machine)
	}
	var names []string
	for _, a := range doc.Approaches {
		names = append(names, a.Name)
		if a.OpsPerS <= 0 || a.P50Ms <= 0 || a.P99Ms < a.P50Ms || a.Errors == nil || *a.Errors != 0 ||
			a.Oversold == nil || a.Stock != 40 || a.Ratio == nil {
			t.Errorf("%s: %+v", a.Name, a)
		}
		if a.Name != "redis-naive" && (a.Sold != 40 || *a.Oversold != 0) {
			t.Errorf("%s sold %d of 40", a.Name, a.Sold)
		}
	}
	if strings.Join(names, ",") != "db-conditional-update,redis-naive,redis-lua-evalsha" {
		t.Errorf("approaches %v", names)
	}
	if r := doc.Approaches[0].Ratio; r == nil || *r != 1 {
		t.Errorf("the only database approach has ratio %v, want 1", r)
	}

	svg, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	bars := 0
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && a.Value == "bar" {
					bars++
				}
			}
		}
	}
	if bars != 3 {
		t.Errorf("%d bars, want 3", bars)
	}
}

// TestBenchEmbeddedText: the table on the embedded stores, which the
// header names.
func TestBenchEmbeddedText(t *testing.T) {
	code, out, errOut := benchRun(t, "--only", "db-pessimistic-lock,redis-lock", "--stock", "30", "--concurrency", "4",
		"--redis", "embedded", "--db", "embedded")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"miniredis (embedded", "SQLite", "approach", "db-pessimistic-lock", "redis-lock", "x best db"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "redis-naive") {
		t.Errorf("--only ran more:\n%s", out)
	}
}
