package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/service"
)

// tool returns the path of an external program a check needs. A machine
// without it skips the check; CI (CI=true) must run every check, so there
// its absence fails the test.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not on PATH (CI must have it: apt-get install %s)", name, pkg)
	}
	t.Skipf("%s not on PATH (apt-get install %s)", name, pkg)
	return ""
}

func promtool(t *testing.T) string {
	t.Helper()
	return tool(t, "promtool", "prometheus")
}

// run runs a command and fails the test, showing its output, when it exits
// non-zero. It returns stdout and stderr together.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// --- Prometheus -------------------------------------------------------------

func TestPrometheusConfig(t *testing.T) {
	t.Parallel()
	run(t, "prometheus", promtool(t), "check", "config", "prometheus.yml")
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	run(t, "prometheus", promtool(t), "check", "rules", "alerts.yml")
}

// TestAlertRulesFire runs alerts_test.yml: every alert fires when it should
// and stays silent when it should not.
func TestAlertRulesFire(t *testing.T) {
	t.Parallel()
	run(t, "prometheus", promtool(t), "test", "rules", "alerts_test.yml")
	// Each alert of alerts.yml has a test.
	rules := readFile(t, "prometheus/alerts.yml")
	tests := readFile(t, "prometheus/alerts_test.yml")
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(rules, -1)
	if len(alerts) == 0 {
		t.Fatal("no alert in alerts.yml")
	}
	for _, m := range alerts {
		if !regexp.MustCompile(`(?m)^\s*alertname: ` + m[1] + `\s*$`).MatchString(tests) {
			t.Errorf("alert %s has no alert_rule_test in alerts_test.yml", m[1])
		}
	}
}

// --- Grafana ------------------------------------------------------------------

// templatedDatasource is the only datasource the dashboard may name: the
// variable DS_PROMETHEUS, so the dashboard fits any Prometheus.
const templatedDatasource = "${DS_PROMETHEUS}"

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource json.RawMessage `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Panels     []panel         `json:"panels"` // a collapsed row's
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(readFile(t, "grafana/seckill.json")), &d); err != nil {
		t.Fatalf("grafana/seckill.json: %v", err)
	}
	return d
}

// allPanels flattens rows: the panels of a collapsed row are inside it.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// checkDatasource accepts no datasource (the panel's is inherited) or the
// templated one, as a string or as {"type": "prometheus", "uid": ...}.
func checkDatasource(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		if name != templatedDatasource {
			return fmt.Errorf("datasource %q, want %q", name, templatedDatasource)
		}
		return nil
	}
	var ref struct{ Type, UID string }
	if err := json.Unmarshal(raw, &ref); err != nil {
		return fmt.Errorf("datasource %s: %v", raw, err)
	}
	if ref.UID != templatedDatasource || ref.Type != "prometheus" {
		return fmt.Errorf("datasource %s, want uid %q of type prometheus", raw, templatedDatasource)
	}
	return nil
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: want both", d.Title, d.UID)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		var query string
		if json.Unmarshal(v.Query, &query) != nil {
			var q struct{ Query string }
			_ = json.Unmarshal(v.Query, &q)
			query = q.Query
		}
		vars[v.Name] = v.Type + " " + query
		if err := checkDatasource(v.Datasource); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	if got := vars["DS_PROMETHEUS"]; got != "datasource prometheus" {
		t.Errorf(`variable DS_PROMETHEUS is %q, want a datasource variable of type prometheus`, got)
	}
	if got := vars["sale"]; !strings.HasPrefix(got, "query label_values(seckill_stock_remaining") || !strings.HasSuffix(got, ", sale)") {
		t.Errorf("variable sale is %q, want label_values(seckill_stock_remaining..., sale)", got)
	}

	ps := allPanels(d.Panels)
	if len(ps) == 0 {
		t.Fatal("no panels")
	}
	ids := map[int]string{}
	for _, p := range ps {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d (taken by %q, or 0)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if err := checkDatasource(p.Datasource); err != nil {
			t.Errorf("panel %q: %v", p.Title, err)
		}
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no target", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q target %s: empty expr", p.Title, q.RefID)
			}
			if err := checkDatasource(q.Datasource); err != nil {
				t.Errorf("panel %q target %s: %v", p.Title, q.RefID, err)
			}
		}
	}
}

// grafanaVars are concrete values for the variables the dashboard's queries
// use, so that promtool can parse them.
var grafanaVars = map[string]string{
	"__rate_interval": "1m", "__interval": "15s", "__range": "1h",
	"instance": "127.0.0.1:8080", "sale": "launch",
}

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// dashboardQueries returns every PromQL expression of the dashboard — each
// target's, and the series selector inside each label_values() variable —
// with its variables replaced, keyed by where it comes from.
func dashboardQueries(t *testing.T, d dashboard) map[string]string {
	t.Helper()
	subst := func(where, expr string) string {
		return grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
			s := grafanaVar.FindStringSubmatch(m)
			name := s[1] + s[2] + s[3]
			v, ok := grafanaVars[name]
			if !ok {
				t.Errorf("%s: unknown variable %s in %q", where, m, expr)
			}
			return v
		})
	}
	out := map[string]string{}
	for _, p := range allPanels(d.Panels) {
		for _, q := range p.Targets {
			where := fmt.Sprintf("panel_%d_%s", p.ID, q.RefID)
			out[where] = subst(fmt.Sprintf("panel %q target %s", p.Title, q.RefID), q.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if json.Unmarshal(v.Query, &q) != nil {
			_ = json.Unmarshal(v.Query, &q.Query)
		}
		if m := labelValues.FindStringSubmatch(q.Query); m != nil {
			out["variable_"+v.Name] = subst("variable "+v.Name, m[1])
		}
	}
	return out
}

// TestDashboardQueriesParse has promtool parse every query of the dashboard,
// as one recording rule each.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	promtool := promtool(t)
	queries := dashboardQueries(t, loadDashboard(t))
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for _, where := range slices.Sorted(maps.Keys(queries)) {
		rules = append(rules, rule{Record: "dashboard:" + where, Expr: queries[where]})
	}
	// JSON is YAML: promtool reads it as a rules file.
	file, err := json.MarshalIndent(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, ".", promtool, "check", "rules", path)
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(out, want) {
		t.Errorf("promtool check rules: want %q in\n%s", want, out)
	}
}

// --- metric names -----------------------------------------------------------

var seckillName = regexp.MustCompile(`\bseckill_[a-zA-Z0-9_]+`)

// TestMetricNames checks that every seckill_* name the alerts and the
// dashboard refer to is one the service registers, asking a service started
// on embedded defaults. A histogram's _bucket, _sum and _count series count
// as the histogram; on any other metric they are errors.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	svc, err := service.Start(ctx, service.Config{
		Addr:           "127.0.0.1:0",
		DatabaseURL:    "sqlite://" + filepath.Join(t.TempDir(), "db.sqlite"),
		ReconcileEvery: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	names := svc.MetricNames()
	types := scrapeTypes(t, svc.URL()+"/metrics")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := svc.Shutdown(sctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if len(names) == 0 {
		t.Fatal("the service registers no metric")
	}

	known := func(name string) bool {
		if slices.Contains(names, name) {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, ok := strings.CutSuffix(name, suffix)
			if !ok || !slices.Contains(names, base) {
				continue
			}
			// A histogram's series. A fresh service exposes every histogram
			// without labels; one with labels would need a sale here first.
			if typ := types[base]; typ == "histogram" || (typ == "summary" && suffix != "_bucket") {
				return true
			}
		}
		return false
	}
	used := map[string]bool{}
	for _, file := range []string{"prometheus/alerts.yml", "grafana/seckill.json"} {
		refs := seckillName.FindAllString(readFile(t, file), -1)
		if len(refs) == 0 {
			t.Errorf("%s names no seckill_* metric", file)
		}
		for _, name := range refs {
			if !known(name) {
				t.Errorf("%s: %s is not a metric of the service (it has: %s)", file, name, strings.Join(names, ", "))
			}
			if file == "grafana/seckill.json" {
				used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
			}
		}
	}
	for _, name := range names {
		if !used[name] {
			t.Logf("no dashboard panel shows %s", name)
		}
	}
}

// scrapeTypes reads the "# TYPE name type" lines of a /metrics page.
func scrapeTypes(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	types := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	return types
}

// --- systemd --------------------------------------------------------------------

const unitExec = "/usr/local/bin/seckill serve"

// TestSystemdUnit has systemd-analyze verify the unit, its ExecStart pointed
// at a freshly built seckill, and checks what the unit promises: secrets in
// the environment file, a stop timeout above the 20 s drain.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	analyze := tool(t, "systemd-analyze", "systemd")
	unit := readFile(t, "systemd/seckill.service")

	directives := map[string][]string{}
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			directives[k] = append(directives[k], v)
		}
	}
	for k, want := range map[string]string{
		"ExecStart": unitExec, "EnvironmentFile": "/etc/seckill/seckill.env", "Restart": "on-failure",
		"KillSignal": "SIGTERM", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "CapabilityBoundingSet": "",
	} {
		if got := directives[k]; !slices.Equal(got, []string{want}) {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	if stop, err := time.ParseDuration(strings.Join(directives["TimeoutStopSec"], "")); err != nil || stop <= 20*time.Second {
		t.Errorf("TimeoutStopSec=%q: want a duration above the service's 20 s drain", directives["TimeoutStopSec"])
	}
	if user := strings.Join(directives["User"], ""); !slices.Equal(directives["DynamicUser"], []string{"yes"}) && (user == "" || user == "root" || user == "0") {
		t.Errorf("DynamicUser=%q User=%q: the service must not run as root", directives["DynamicUser"], user)
	}
	for _, env := range directives["Environment"] {
		if strings.Contains(env, "SECKILL_") {
			t.Errorf("Environment=%s: configuration belongs in the EnvironmentFile", env)
		}
	}

	bin := buildSeckill(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "seckill.service")
	if err := os.WriteFile(path, []byte(strings.Replace(unit, "ExecStart="+unitExec, "ExecStart="+bin+" serve", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"verify"}
	help, _ := exec.Command(analyze, "--help").CombinedOutput()
	for _, flag := range []string{"--man=no", "--recursive-errors=no"} {
		if bytes.Contains(help, []byte(strings.Split(flag, "=")[0])) {
			args = append(args, flag)
		}
	}
	// verify exits 0 on warnings such as an unknown directive: any line
	// about our unit is a failure; lines about others (a broken unit of the
	// host it depends on) are only logged.
	out, err := exec.Command(analyze, append(args, path)...).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze %s: %v", strings.Join(args, " "), err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case line == "":
		case strings.Contains(line, "seckill.service") || err != nil:
			t.Errorf("systemd-analyze verify: %s", line)
		default:
			t.Logf("systemd-analyze verify (not about seckill.service): %s", line)
		}
	}

	// The hardening does not regress: exposure at most 2.0 of 10.
	if bytes.Contains(help, []byte("--offline")) && bytes.Contains(help, []byte("--threshold")) {
		out, err := exec.Command(analyze, "security", "--offline=yes", "--threshold=20", "--no-pager", path).CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			t.Errorf("systemd-analyze security: %v; it says: %s", err, lines[len(lines)-1])
		}
	}

	// The environment file lists exactly the variables seckill serve reads.
	helpOut, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	envVar := regexp.MustCompile(`\bSECKILL_[A-Z_]+`)
	want := slices.Compact(slices.Sorted(slices.Values(envVar.FindAllString(string(helpOut), -1))))
	example := readFile(t, "systemd/seckill.env.example")
	got := slices.Compact(slices.Sorted(slices.Values(envVar.FindAllString(example, -1))))
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("seckill.env.example names %v; seckill serve -h names %v", got, want)
	}
	for i, line := range strings.Split(example, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") && !regexp.MustCompile(`^SECKILL_[A-Z_]+=\S*$`).MatchString(line) {
			t.Errorf("seckill.env.example:%d: %q is not VAR=value", i+1, line)
		}
	}
}

// buildSeckill builds ./cmd/seckill into a temporary directory. Under -race
// it builds with -race too, so it reuses the packages this test already
// compiled instead of compiling the dependencies a second time.
func buildSeckill(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "seckill")
	args := []string{"build", "-o", bin}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	run(t, "..", gobin, append(args, "./cmd/seckill")...)
	return bin
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
