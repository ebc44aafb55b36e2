package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redis/go-redis/v9"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v4"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// The deployment files of deploy/ (docs/operations.md): the alert rules
// and their promtool unit tests, Prometheus's configuration, and the
// Grafana dashboard, checked against what the roles really register.

const deployDir = "../../deploy"

// promtool returns the path of promtool, or skips the test (fails it under
// CI) when it is not installed.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool is not installed: scripts/prepare.sh installs Debian's prometheus package, which has it (apt-get install prometheus)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// TestPromtoolRules runs promtool over deploy/prometheus: the rules and
// the configuration check, and the rules' unit tests pass; and every
// alert of the rules is tested firing at least once.
func TestPromtoolRules(t *testing.T) {
	bin := promtool(t)
	dir := filepath.Join(deployDir, "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"check", "config", "prometheus.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, filepath.Join(dir, "alerts_test.yml"), &tests)
	fired := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	rules := readRules(t)
	if len(rules) == 0 {
		t.Fatal("no alert in alerts.yml")
	}
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		if !fired[r.Alert] {
			t.Errorf("alert %s is never tested firing in alerts_test.yml", r.Alert)
		}
		if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
			t.Errorf("alert %s: want a severity label and a summary annotation", r.Alert)
		}
	}
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join(deployDir, "prometheus", "alerts.yml"), &f)
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// deployQuery is one PromQL expression of deploy/ and where it is.
type deployQuery struct{ where, expr string }

// deployQueries returns every expression of the alert rules and of the
// dashboards (panel targets and query variables), Grafana's variables
// replaced by values PromQL parses.
func deployQueries(t *testing.T) []deployQuery {
	t.Helper()
	var qs []deployQuery
	for _, r := range readRules(t) {
		qs = append(qs, deployQuery{"alerts.yml " + r.Alert + r.Record, r.Expr})
	}
	dashboards, err := filepath.Glob(filepath.Join(deployDir, "grafana", "dashboards", "*.json"))
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboard under deploy/grafana/dashboards (%v)", err)
	}
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)
	for _, path := range dashboards {
		var d struct {
			Panels     []dashPanel `json:"panels"`
			Templating struct {
				List []struct {
					Name       string `json:"name"`
					Type       string `json:"type"`
					Definition string `json:"definition"`
				} `json:"list"`
			} `json:"templating"`
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		name := filepath.Base(path)
		var walk func([]dashPanel)
		walk = func(ps []dashPanel) {
			for _, p := range ps {
				for _, tg := range p.Targets {
					qs = append(qs, deployQuery{name + " panel " + p.Title, grafanaVars.Replace(tg.Expr)})
				}
				if p.Type != "row" && len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", name, p.Title)
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			m := labelValues.FindStringSubmatch(v.Definition)
			if m == nil {
				t.Errorf("%s: variable %s: want label_values(QUERY, label), got %q", name, v.Name, v.Definition)
				continue
			}
			qs = append(qs, deployQuery{name + " variable " + v.Name, m[1]})
		}
	}
	return qs
}

type dashPanel struct {
	Title   string      `json:"title"`
	Type    string      `json:"type"`
	Panels  []dashPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// selector is one series selector of a query: the metric and the labels it
// filters on.
type selector struct {
	metric string
	labels map[string]string // label -> the value matched ("" for a regexp or negative match)
}

// selectors parses expr and returns its series selectors.
func selectors(expr string) ([]selector, error) {
	e, err := metricsql.Parse(expr)
	if err != nil {
		return nil, err
	}
	var out []selector
	var bad error
	metricsql.VisitAll(e, func(e metricsql.Expr) {
		me, ok := e.(*metricsql.MetricExpr)
		if !ok {
			return
		}
		for _, lfs := range me.LabelFilterss {
			s := selector{labels: map[string]string{}}
			for _, lf := range lfs {
				switch {
				case lf.Label == "__name__" && !lf.IsRegexp && !lf.IsNegative:
					s.metric = lf.Value
				case lf.Label == "__name__":
					bad = errors.New("a regexp on the metric name cannot be checked")
				case lf.IsRegexp || lf.IsNegative:
					s.labels[lf.Label] = ""
				default:
					s.labels[lf.Label] = lf.Value
				}
			}
			if s.metric == "" {
				bad = errors.New("a selector without a metric name")
			}
			out = append(out, s)
		}
	})
	return out, bad
}

// roleRegistries builds the registries of the long-running roles the way
// they do (feed api, feed cdc, feed project with FEED_VERIFY_EVERY), over
// the test's own PostgreSQL, Redis and broker, and returns them by
// Prometheus job (deploy/prometheus/prometheus.yml).
func roleRegistries(t *testing.T) map[string]*prometheus.Registry {
	t.Helper()
	db, rdb, b := testenv.NewDB(t), testenv.NewRedis(t), kafkatest.Start(t)
	topic := b.Topic(t, 1)
	t.Setenv("DATABASE_URL", db.URL)
	t.Setenv("REDIS_URL", testenv.RedisURL())
	t.Setenv("KAFKA_BROKERS", strings.Join(b.Addrs(), ","))
	t.Setenv("FEED_TOPIC", topic)
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("FEED_VERIFY_EVERY", "1h")
	cfg, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := testenv.Logger()
	if cfg, err = resolvePolicy(ctx, cfg, db.Pool, log); err != nil {
		t.Fatal(err)
	}

	api := newRoleRegistry()
	at, err := newAPI(ctx, cfg, apiParts{Pool: db.Pool, Redis: rdb.Client, Registry: api, Log: log, Stdout: io.Discard, AllowDevSecret: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := at.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := at.svc.Stop(); err != nil { // closes the listener
		t.Fatal(err)
	}

	cdcReg := newRoleRegistry()
	pub, err := kafka.NewPublisher(connOf(cfg), kafka.Logger(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	if _, err := cdc.New(cdcConfig(cfg, cdcReg, log), db.Pool, pub); err != nil {
		t.Fatal(err)
	}

	project := newRoleRegistry()
	svcs, err := projectServices(ctx, cfg, db.Pool, rdb.Client, nil, project, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 {
		t.Fatalf("feed project with FEED_VERIFY_EVERY: %d services, want the projectors and the verification", len(svcs))
	}
	return map[string]*prometheus.Registry{"feed-api": api, "feed-cdc": cdcReg, "feed-projector": project}
}

// probe is a collector of one made-up descriptor.
type probe struct{ d *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.d }
func (p probe) Collect(chan<- prometheus.Metric)    {}

// registered reports whether a collector of reg describes a metric of
// this name, whether or not it has series yet (a vector without children
// gathers nothing). The registry refuses a second descriptor of a name
// with other labels or help, which is how it tells.
func registered(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	p := probe{prometheus.NewDesc(name, "a probe of the deploy test", nil, nil)}
	err := reg.Register(p)
	if err == nil {
		reg.Unregister(p)
		return false
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) || strings.Contains(err.Error(), "same fully-qualified name") {
		return true
	}
	t.Fatalf("probe %s: %v", name, err)
	return false
}

// TestDeployMetricNames checks every expression of the alert rules and
// the dashboard: it parses, each metric it selects is registered by the
// role of the job it names (any feed role without a job), a histogram's
// _bucket, _sum and _count only of a histogram (or of a vector without
// series yet whose name does not end in _total), the labels it filters on
// are the metric's (for the metrics that have series at start), and each
// job is one Prometheus scrapes.
func TestDeployMetricNames(t *testing.T) {
	var promCfg prometheusConfig
	readYAML(t, filepath.Join(deployDir, "prometheus", "prometheus.yml"), &promCfg)
	regs := roleRegistries(t)
	var jobs []string
	for _, sc := range promCfg.ScrapeConfigs {
		if regs[sc.JobName] == nil {
			t.Errorf("prometheus.yml scrapes job %s, which is no feed role", sc.JobName)
		}
		jobs = append(jobs, sc.JobName)
	}
	// What each registry gathers at start: types and label names.
	families := map[string]map[string]*dto.MetricFamily{}
	for job, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		families[job] = map[string]*dto.MetricFamily{}
		for _, mf := range mfs {
			families[job][mf.GetName()] = mf
		}
	}
	targetLabels := map[string]bool{"job": true, "instance": true}
	// lookup returns the family of metric in job's registry (nil when it
	// has no series yet), and whether the role registers it.
	lookup := func(job, metric string) (*dto.MetricFamily, bool, string) {
		if registered(t, regs[job], metric) {
			return families[job][metric], true, ""
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, ok := strings.CutSuffix(metric, suffix)
			if !ok || !registered(t, regs[job], base) {
				continue
			}
			mf := families[job][base]
			switch {
			case mf == nil && strings.HasSuffix(base, "_total"):
				return nil, false, base + " is a counter"
			case mf == nil: // a vector without series: its type is not known here
				return nil, true, ""
			case mf.GetType() == dto.MetricType_HISTOGRAM, suffix != "_bucket" && mf.GetType() == dto.MetricType_SUMMARY:
				return nil, true, ""
			default:
				return nil, false, base + " is a " + mf.GetType().String()
			}
		}
		return nil, false, ""
	}

	queries := deployQueries(t)
	checked := map[string]bool{}
	for _, q := range queries {
		sels, err := selectors(q.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, q.expr)
			continue
		}
		for _, s := range sels {
			if s.metric == "up" { // Prometheus's own, per target
				if j := s.labels["job"]; j != "" && !slices.Contains(jobs, j) {
					t.Errorf("%s: job %q is not scraped (prometheus.yml has %v)", q.where, j, jobs)
				}
				continue
			}
			var candidates []string
			if j, ok := s.labels["job"]; ok && j != "" {
				if regs[j] == nil {
					t.Errorf("%s: job %q is no feed role (prometheus.yml has %v)", q.where, j, jobs)
					continue
				}
				candidates = []string{j}
			} else {
				candidates = jobs
			}
			found := false
			for _, job := range candidates {
				mf, ok, why := lookup(job, s.metric)
				if why != "" {
					t.Errorf("%s: %s: %s", q.where, s.metric, why)
				}
				if !ok {
					continue
				}
				found = true
				checked[s.metric] = true
				if mf == nil || len(mf.GetMetric()) == 0 {
					continue
				}
				have := map[string]bool{}
				for _, lp := range mf.GetMetric()[0].GetLabel() {
					have[lp.GetName()] = true
				}
				for l := range s.labels {
					if !have[l] && !targetLabels[l] {
						t.Errorf("%s: %s has no label %q (it has %v)", q.where, s.metric, l, keys(have))
					}
				}
			}
			if !found {
				t.Errorf("%s: metric %s is registered by none of %v", q.where, s.metric, candidates)
			}
		}
	}
	if len(checked) < 20 {
		t.Errorf("only %d metrics checked over %d queries: %v", len(checked), len(queries), keys(checked))
	}
	// The check itself: a name no role registers is refused.
	for job, reg := range regs {
		if registered(t, reg, "feed_no_such_metric_total") {
			t.Fatalf("%s: the probe finds a metric that does not exist", job)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestComposeSecretAndMetrics parses compose.yaml: FEED_JWT_SECRET has no
// default (compose refuses to start without it), and every feed service
// serves the metrics that deploy/prometheus/prometheus.yml scrapes on its
// admin listener: the API's FEED_ADMIN_ADDR, cdc's and project's
// --metrics-addr, on the port of their job's target.
func TestComposeSecretAndMetrics(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Build       any            `yaml:"build"`
			Command     []string       `yaml:"command"`
			Environment map[string]any `yaml:"environment"`
		} `yaml:"services"`
	}
	readYAML(t, "../../compose.yaml", &compose)
	var promCfg prometheusConfig
	readYAML(t, filepath.Join(deployDir, "prometheus", "prometheus.yml"), &promCfg)
	targets := map[string]string{} // service -> port scraped
	for _, sc := range promCfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				host, port, _ := strings.Cut(tg, ":")
				targets[host] = port
			}
		}
	}
	roles := 0
	for name, svc := range compose.Services {
		if svc.Build == nil || len(svc.Command) == 0 {
			continue // not the feed image
		}
		roles++
		secret, _ := svc.Environment["FEED_JWT_SECRET"].(string)
		if !strings.HasPrefix(secret, "${FEED_JWT_SECRET:?") {
			t.Errorf("service %s: FEED_JWT_SECRET = %q, want ${FEED_JWT_SECRET:?...} (required, no default)", name, secret)
		}
		var addr string
		switch svc.Command[0] {
		case "cdc", "project":
			i := slices.Index(svc.Command, "--metrics-addr")
			if i < 0 || i+1 >= len(svc.Command) {
				t.Errorf("service %s: %v serves no metrics (want --metrics-addr)", name, svc.Command)
				continue
			}
			addr = svc.Command[i+1]
		case "api":
			addr, _ = svc.Environment["FEED_ADMIN_ADDR"].(string)
		default:
			continue
		}
		if port, ok := targets[name]; ok && !strings.HasSuffix(addr, ":"+port) {
			t.Errorf("service %s serves metrics on %q; prometheus.yml scrapes port %s", name, addr, port)
		}
	}
	for _, s := range []string{"api", "cdc", "projector"} {
		if _, ok := targets[s]; !ok {
			t.Errorf("prometheus.yml scrapes no %s", s)
		}
	}
	if roles < 4 {
		t.Fatalf("found %d feed services in compose.yaml, want migrate, cdc, projector, api and more", roles)
	}
}

// prometheusConfig is what the deploy tests read of a Prometheus
// configuration (deploy/prometheus/prometheus.yml).
type prometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// composeService is what the compose tests read of a service (merge keys
// resolved by the YAML decoder, as compose does). Commands, entrypoints,
// healthcheck tests and depends_on take every form compose accepts.
type composeService struct {
	Build       any            `yaml:"build"`
	Image       string         `yaml:"image"`
	Entrypoint  words          `yaml:"entrypoint"`
	Command     words          `yaml:"command"`
	Environment map[string]any `yaml:"environment"`
	Restart     string         `yaml:"restart"`
	Profiles    []string       `yaml:"profiles"`
	Volumes     []string       `yaml:"volumes"`
	Healthcheck *struct {
		Test words `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn dependencies `yaml:"depends_on"`
	Deploy    struct {
		Replicas int `yaml:"replicas"`
	} `yaml:"deploy"`
	Ports   []string `yaml:"ports"`
	Configs []struct {
		Source string `yaml:"source"`
		Target string `yaml:"target"`
	} `yaml:"configs"`
}

func (s composeService) inProfile(p string) bool { return slices.Contains(s.Profiles, p) }

// words is a command, an entrypoint or a healthcheck test: a list, or a
// string that compose splits into words.
type words []string

func (w *words) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*w = strings.Fields(s)
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*w = l
	return nil
}

// dependencies is a depends_on: the services depended on, with their
// conditions ("" for the list form, which means service_started).
type dependencies map[string]string

func (d *dependencies) UnmarshalYAML(n *yaml.Node) error {
	out := dependencies{}
	if n.Kind == yaml.SequenceNode {
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, s := range l {
			out[s] = ""
		}
		*d = out
		return nil
	}
	var m map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	for s, c := range m {
		out[s] = c.Condition
	}
	*d = out
	return nil
}

func readCompose(t *testing.T) map[string]composeService {
	t.Helper()
	var compose struct {
		Services map[string]composeService `yaml:"services"`
	}
	readYAML(t, "../../compose.yaml", &compose)
	if len(compose.Services) == 0 {
		t.Fatal("compose.yaml: no services")
	}
	return compose.Services
}

// TestComposeHealthchecks parses compose.yaml: every long-running feed
// service (one with a restart policy; the others are jobs such as migrate,
// which the roles wait for to complete) has a healthcheck that runs `feed
// healthcheck` from the image's path, against its own role's endpoint (the
// API's /readyz on HTTP_ADDR, cdc's and project's /healthz on
// --metrics-addr); every service_healthy dependency names a service that
// has a healthcheck, and the stores every role needs have one.
func TestComposeHealthchecks(t *testing.T) {
	services := readCompose(t)
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	const bin = "/usr/local/bin/feed"
	if !strings.Contains(string(dockerfile), "COPY --from=build /out/feed "+bin) {
		t.Fatalf("the Dockerfile does not install the binary at %s", bin)
	}
	roles := 0
	for name, svc := range services {
		if svc.Build == nil || len(svc.Command) == 0 {
			continue
		}
		if svc.Restart == "" {
			if svc.Healthcheck != nil || svc.Command[0] != "migrate" {
				t.Errorf("service %s (%v): no restart policy, want a job (migrate) without a healthcheck", name, svc.Command)
			}
			continue
		}
		roles++
		if svc.Healthcheck == nil {
			t.Errorf("service %s (%v) has no healthcheck", name, svc.Command)
			continue
		}
		test := svc.Healthcheck.Test
		if len(test) < 3 || test[0] != "CMD" || test[1] != bin || test[2] != "healthcheck" {
			t.Errorf("service %s: healthcheck %v, want [CMD %s healthcheck ...]", name, test, bin)
			continue
		}
		var want string // the URL the role serves its health on, seen from inside the container
		switch svc.Command[0] {
		case "api":
			addr, _ := svc.Environment["HTTP_ADDR"].(string)
			want = readyzURL(addr)
		case "cdc", "project":
			i := slices.Index(svc.Command, "--metrics-addr")
			if i < 0 || i+1 >= len(svc.Command) {
				t.Errorf("service %s: %v serves no /healthz (want --metrics-addr)", name, svc.Command)
				continue
			}
			_, port, _ := strings.Cut(svc.Command[i+1], ":")
			want = "http://127.0.0.1:" + port + "/healthz"
		default:
			t.Errorf("service %s: a long-running %q the test does not know", name, svc.Command[0])
			continue
		}
		got := want // no --url: the default, HTTP_ADDR's /readyz
		if i := slices.Index(test, "--url"); i >= 0 && i+1 < len(test) {
			got = test[i+1]
		} else if svc.Command[0] != "api" {
			t.Errorf("service %s: healthcheck %v has no --url (its default is the API's)", name, test)
		}
		if got != want {
			t.Errorf("service %s: healthcheck asks %s, the role serves %s", name, got, want)
		}
	}
	if roles < 6 {
		t.Errorf("%d long-running feed services, want api, cdc, projector and the scale profile's", roles)
	}
	for name, svc := range services {
		for dep, d := range svc.DependsOn {
			target, ok := services[dep]
			switch {
			case !ok:
				t.Errorf("service %s depends on %s, which is no service", name, dep)
			case d == "service_healthy" && target.Healthcheck == nil:
				t.Errorf("service %s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
	}
	for _, s := range []string{"postgres", "redis", "kafka"} {
		if services[s].Healthcheck == nil {
			t.Errorf("service %s has no healthcheck", s)
		}
	}
}

// bindMounts returns a service's bind mounts (a host path starting with
// ./ or ../, relative to compose.yaml) as container path -> host path.
func bindMounts(svc composeService) map[string]string {
	out := map[string]string{}
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], ".") {
			continue
		}
		out[parts[1]] = filepath.Join("../..", parts[0])
	}
	return out
}

// mounted resolves a container path through the mounts: the host path it
// shows, or "" when no mount covers it.
func mounted(mounts map[string]string, path string) string {
	best := ""
	for target := range mounts {
		if (path == target || strings.HasPrefix(path, target+"/")) && len(target) > len(best) {
			best = target
		}
	}
	if best == "" {
		return ""
	}
	return filepath.Join(mounts[best], strings.TrimPrefix(path, best))
}

// TestComposeObservability parses compose.yaml's observability profile:
// Prometheus runs on deploy/prometheus/prometheus.yml with the rule files
// it names mounted beside it, and scrapes services compose has (outside
// any profile, so the default stack has them) on the ports they serve
// metrics on; Grafana's provisioning is deploy/grafana/provisioning, the
// dashboards provider's path is where deploy/grafana/dashboards is
// mounted, and its data source is the Prometheus service. Every bind
// mount's host path exists.
func TestComposeObservability(t *testing.T) {
	services := readCompose(t)
	for name, svc := range services {
		for target, host := range bindMounts(svc) {
			if _, err := os.Stat(host); err != nil {
				t.Errorf("service %s mounts %s at %s: %v", name, host, target, err)
			}
		}
	}
	prom, ok := services["prometheus"]
	graf, ok2 := services["grafana"]
	if !ok || !ok2 {
		t.Fatal("compose.yaml has no prometheus or grafana service")
	}
	for name, svc := range map[string]composeService{"prometheus": prom, "grafana": graf} {
		if !slices.Equal(svc.Profiles, []string{"observability"}) {
			t.Errorf("service %s: profiles %v, want [observability]", name, svc.Profiles)
		}
	}

	// Prometheus: the configuration and the rules it loads.
	promMounts := bindMounts(prom)
	cfgPath := ""
	for _, arg := range prom.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			cfgPath = v
		}
	}
	if cfgPath == "" {
		t.Fatalf("prometheus: command %v has no --config.file", prom.Command)
	}
	wantCfg := filepath.Join(deployDir, "prometheus", "prometheus.yml")
	if got := mounted(promMounts, cfgPath); got != filepath.Clean(wantCfg) {
		t.Fatalf("prometheus: %s is %q, want %s", cfgPath, got, wantCfg)
	}
	var promCfg prometheusConfig
	readYAML(t, wantCfg, &promCfg)
	if len(promCfg.RuleFiles) == 0 {
		t.Error("prometheus.yml loads no rule file")
	}
	for _, rf := range promCfg.RuleFiles {
		inContainer := filepath.Join(filepath.Dir(cfgPath), rf)
		want := filepath.Join(filepath.Dir(wantCfg), rf)
		if got := mounted(promMounts, inContainer); got != filepath.Clean(want) {
			t.Errorf("prometheus: rule file %s is %q in the container, want %s", inContainer, got, want)
		}
	}
	scraped := 0
	for _, sc := range promCfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				host, port, _ := strings.Cut(tg, ":")
				svc, ok := services[host]
				switch {
				case !ok:
					t.Errorf("job %s scrapes %s: compose.yaml has no service %s", sc.JobName, tg, host)
					continue
				case len(svc.Profiles) > 0:
					t.Errorf("job %s scrapes %s, which only runs in profiles %v", sc.JobName, tg, svc.Profiles)
				}
				scraped++
				addr, _ := svc.Environment["FEED_ADMIN_ADDR"].(string)
				if i := slices.Index(svc.Command, "--metrics-addr"); i >= 0 && i+1 < len(svc.Command) {
					addr = svc.Command[i+1]
				}
				if !strings.HasSuffix(addr, ":"+port) {
					t.Errorf("job %s scrapes %s; the service serves metrics on %q", sc.JobName, tg, addr)
				}
			}
		}
	}
	if scraped < 3 {
		t.Errorf("prometheus.yml scrapes %d targets, want api, cdc and projector", scraped)
	}

	// Grafana: provisioning, the dashboards' path, the data source.
	grafMounts := bindMounts(graf)
	provisioning := filepath.Join(deployDir, "grafana", "provisioning")
	if got := mounted(grafMounts, "/etc/grafana/provisioning"); got != filepath.Clean(provisioning) {
		t.Errorf("grafana: /etc/grafana/provisioning is %q, want %s", got, provisioning)
	}
	providers, err := filepath.Glob(filepath.Join(provisioning, "dashboards", "*.yml"))
	if err != nil || len(providers) == 0 {
		t.Fatalf("no dashboard provider under %s (%v)", provisioning, err)
	}
	for _, p := range providers {
		var f struct {
			Providers []struct {
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		readYAML(t, p, &f)
		for _, pr := range f.Providers {
			want := filepath.Join(deployDir, "grafana", "dashboards")
			if got := mounted(grafMounts, pr.Options.Path); got != filepath.Clean(want) {
				t.Errorf("%s: dashboards path %s is %q in the container, want %s", p, pr.Options.Path, got, want)
			}
		}
	}
	if home, _ := graf.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].(string); home != "" {
		if got := mounted(grafMounts, home); got == "" {
			t.Errorf("grafana: the home dashboard %s is not mounted", home)
		} else if _, err := os.Stat(got); err != nil {
			t.Errorf("grafana: the home dashboard %s: %v", home, err)
		}
	}
	var ds struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(provisioning, "datasources", "prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana's data source %+v, want the prometheus service at http://prometheus:9090", ds.Datasources)
	}
	if slices.ContainsFunc(prom.Command, func(a string) bool { return strings.HasPrefix(a, "--web.listen-address") }) {
		t.Error("prometheus: the data source expects its default port 9090, not --web.listen-address")
	}
}

// TestComposeScaleProfile checks compose.yaml's scale profile without a
// Docker engine: its Redis nodes are cluster nodes that one one-shot
// service joins into one cluster (every node named, no replicas, IP
// addresses for CLUSTER MEET) after each is healthy; every feed role of
// the profile that reads Redis has REDIS_URL in go-redis's cluster form
// naming exactly those nodes, and starts after the cluster is made; the
// projector runs at least two processes; the APIs are at least two, each
// with its own FEED_NODE_ID and host port, and the balancer names each of
// them at its port; and every depends_on of every service names a
// service that exists and runs in the same profiles.
func TestComposeScaleProfile(t *testing.T) {
	var compose struct {
		Services map[string]composeService `yaml:"services"`
		Configs  map[string]struct {
			Content string `yaml:"content"`
		} `yaml:"configs"`
	}
	readYAML(t, "../../compose.yaml", &compose)
	svcs := compose.Services

	for name, s := range svcs {
		for dep := range s.DependsOn {
			d, ok := svcs[dep]
			if !ok {
				t.Errorf("service %s depends on %s, which compose.yaml does not have", name, dep)
				continue
			}
			for _, p := range d.Profiles {
				if !s.inProfile(p) {
					t.Errorf("service %s depends on %s, which runs only in profile %s (%s does not)", name, dep, p, name)
				}
			}
		}
	}

	// The cluster's nodes, and the one-shot service that joins them.
	nodes := map[string]bool{}
	for name, s := range svcs {
		cmd := s.Command
		if !s.inProfile("scale") || len(cmd) == 0 || cmd[0] != "redis-server" {
			continue
		}
		i := slices.Index(cmd, "--cluster-enabled")
		if i < 0 || i+1 >= len(cmd) || cmd[i+1] != "yes" {
			t.Errorf("service %s: redis-server without --cluster-enabled yes: %v", name, cmd)
			continue
		}
		if j := slices.Index(cmd, "--cluster-announce-hostname"); j >= 0 && (j+1 >= len(cmd) || cmd[j+1] != name) {
			t.Errorf("service %s announces another hostname: %v", name, cmd)
		}
		if s.Healthcheck == nil {
			t.Errorf("cluster node %s has no healthcheck: the cluster's creation cannot wait for it", name)
		}
		nodes[name] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("the scale profile has %d Redis Cluster nodes, want 3", len(nodes))
	}
	var init string
	for name, s := range svcs {
		script := strings.Join(slices.Concat(s.Entrypoint, s.Command), " ")
		if !s.inProfile("scale") || !strings.Contains(script, "--cluster create") {
			continue
		}
		if init != "" {
			t.Errorf("two services create the cluster: %s and %s", init, name)
		}
		init = name
		create := script[strings.Index(script, "--cluster create"):]
		for n := range nodes {
			// CLUSTER MEET takes IP addresses: a node is named by the
			// lookup of its hostname.
			if !strings.Contains(create, "getent hosts "+n+" ") {
				t.Errorf("the cluster's creation (%s) does not name node %s by its address: %s", name, n, create)
			}
		}
		for _, w := range []string{"--cluster-replicas 0", "--cluster-yes", "cluster_state:ok"} {
			if !strings.Contains(create, w) {
				t.Errorf("the cluster's creation (%s) lacks %q: %s", name, w, create)
			}
		}
		deps := s.DependsOn
		for n := range nodes {
			if deps[n] != "service_healthy" {
				t.Errorf("the cluster's creation (%s) does not wait for node %s to be healthy (depends_on: %v)", name, n, deps)
			}
		}
	}
	if init == "" {
		t.Fatal("no service of the scale profile creates the cluster (redis-cli --cluster create)")
	}

	// The feed roles of the profile.
	var apis []string
	projectors := 0
	nodeIDs := map[string]string{}
	hostPorts := map[string]string{}
	for name, s := range svcs {
		cmd := s.Command
		if !s.inProfile("scale") || s.Build == nil || len(cmd) == 0 {
			continue
		}
		switch cmd[0] {
		case "api", "project":
		default:
			continue
		}
		raw, _ := s.Environment["REDIS_URL"].(string)
		if !isClusterURL(raw) {
			t.Errorf("service %s: REDIS_URL %q is not the cluster form", name, raw)
		} else if opt, err := redis.ParseClusterURL(raw); err != nil {
			t.Errorf("service %s: REDIS_URL %q: %v", name, raw, err)
		} else {
			got := map[string]bool{}
			for _, a := range opt.Addrs {
				got[a] = true
			}
			want := map[string]bool{}
			for n := range nodes {
				want[n+":6379"] = true
			}
			if !maps.Equal(got, want) {
				t.Errorf("service %s: REDIS_URL names %v, want every cluster node: %v", name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
		}
		if c := s.DependsOn[init]; c != "service_completed_successfully" {
			t.Errorf("service %s does not wait for the cluster's creation (%s: %q)", name, init, c)
		}
		if cmd[0] == "project" {
			projectors += max(s.Deploy.Replicas, 1)
			continue
		}
		apis = append(apis, name)
		if fmt.Sprint(s.Environment["FEED_READ_CACHE_BARRIER"]) != "1" {
			t.Errorf("API %s behind the balancer has no FEED_READ_CACHE_BARRIER=1: a post through the other instance could be missing from its author's next read", name)
		}
		id := fmt.Sprint(s.Environment["FEED_NODE_ID"])
		if s.Environment["FEED_NODE_ID"] == nil || s.Deploy.Replicas > 1 {
			t.Errorf("API %s has no FEED_NODE_ID of its own (replicas %d): two instances could mint the same post id", name, s.Deploy.Replicas)
		} else if other, ok := nodeIDs[id]; ok {
			t.Errorf("APIs %s and %s have the same FEED_NODE_ID %s", name, other, id)
		}
		nodeIDs[id] = name
		for _, p := range s.Ports {
			host, _, _ := strings.Cut(p, ":")
			if other, ok := hostPorts[host]; ok {
				t.Errorf("APIs %s and %s publish the same host port %s", name, other, host)
			}
			hostPorts[host] = name
		}
	}
	if projectors < 2 {
		t.Errorf("the scale profile runs %d projector processes, want 2 or more", projectors)
	}
	if len(apis) < 2 {
		t.Fatalf("the scale profile has %d API services, want 2 or more", len(apis))
	}

	// The balancer: a service of the profile depending on every API, whose
	// configuration names each at its port.
	balancers := 0
	for name, s := range svcs {
		if !s.inProfile("scale") || s.Build != nil || !strings.HasPrefix(s.Image, "nginx") {
			continue
		}
		balancers++
		var conf string
		for _, c := range s.Configs {
			conf += compose.Configs[c.Source].Content
		}
		for _, a := range apis {
			_, port, _ := strings.Cut(fmt.Sprint(svcs[a].Environment["HTTP_ADDR"]), ":")
			if !regexp.MustCompile(`(?m)^\s*server\s+` + regexp.QuoteMeta(a+":"+port) + `\s*;`).MatchString(conf) {
				t.Errorf("balancer %s does not name API %s at %s:%s: %q", name, a, a, port, conf)
			}
			if _, ok := s.DependsOn[a]; !ok {
				t.Errorf("balancer %s does not depend on API %s", name, a)
			}
		}
	}
	if balancers != 1 {
		t.Errorf("the scale profile has %d balancers (nginx) in front of its APIs, want 1", balancers)
	}
}
