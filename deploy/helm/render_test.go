// Package helm tests the layer0 Helm chart: it is rendered with Helm's own template engine, as
// `helm template` does, for the default values and for a values file that turns every option on,
// and every manifest is decoded strictly into the Kubernetes API types (an unknown or misplaced
// field fails), and the layer0 configuration it carries is loaded by layer0's own parser.
package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/layer0ai/layer0/internal/config"
)

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor the chart uses: its
// CRD is not in k8s.io/api, and a strict decode into this catches a misplaced field all the same.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one release's manifests, decoded.
type rendered struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	configMap      *corev1.ConfigMap
	secrets        map[string]*corev1.Secret
	hpa            *autoscalingv2.HorizontalPodAutoscaler
	pdb            *policyv1.PodDisruptionBudget
	serviceMonitor *serviceMonitor
	kinds          []string
}

// render renders the chart with the values file at valuesPath ("" for the defaults) and
// decodes every manifest strictly.
func render(t *testing.T, valuesPath string) *rendered {
	t.Helper()
	ch, err := loader.Load("layer0")
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if valuesPath != "" {
		if vals, err = chartutil.ReadValuesFile(valuesPath); err != nil {
			t.Fatal(err)
		}
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "gw", Namespace: "llm",
		IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	r := &rendered{secrets: map[string]*corev1.Secret{}}
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(filepath.Base(name), "_") {
			continue
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[name], -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var obj any
			switch tm.Kind {
			case "Deployment":
				r.deployment = &appsv1.Deployment{}
				obj = r.deployment
			case "Service":
				r.service = &corev1.Service{}
				obj = r.service
			case "ConfigMap":
				r.configMap = &corev1.ConfigMap{}
				obj = r.configMap
			case "Secret":
				obj = &corev1.Secret{}
			case "HorizontalPodAutoscaler":
				r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
				obj = r.hpa
			case "PodDisruptionBudget":
				r.pdb = &policyv1.PodDisruptionBudget{}
				obj = r.pdb
			case "ServiceMonitor":
				r.serviceMonitor = &serviceMonitor{}
				obj = r.serviceMonitor
			default:
				t.Fatalf("%s: unexpected kind %q", name, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s does not decode strictly: %v\n%s", name, tm.Kind, err, doc)
			}
			if s, ok := obj.(*corev1.Secret); ok {
				r.secrets[s.Name] = s
			}
			r.kinds = append(r.kinds, tm.Kind)
		}
	}
	return r
}

// layer0Config loads the configuration the chart renders, with layer0's own strict parser.
func layer0Config(t *testing.T, r *rendered) *config.Config {
	t.Helper()
	var text string
	if r.configMap != nil {
		text = r.configMap.Data["layer0.yaml"]
	} else if s := r.secrets["gw-layer0-config"]; s != nil {
		text = s.StringData["layer0.yaml"]
	}
	if text == "" {
		t.Fatal("no layer0.yaml rendered")
	}
	cfg, err := config.LoadBytes("layer0.yaml", []byte(text))
	if err != nil {
		t.Fatalf("the rendered configuration does not load: %v\n%s", err, text)
	}
	return cfg
}

// checkPod checks what must hold whatever the values: probes on the admin listener, the grace
// period covering the preStop pause and the drain, the config mounted as a directory.
func checkPod(t *testing.T, r *rendered, cfg *config.Config) {
	t.Helper()
	pod := r.deployment.Spec.Template.Spec
	c := pod.Containers[0]
	for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "admin" {
			t.Errorf("%s probe: %+v, want an HTTP GET on the admin port", what, p)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probe paths: readiness %s, liveness %s", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	var admin int32
	for _, p := range c.Ports {
		if p.Name == "admin" {
			admin = p.ContainerPort
		}
	}
	if want := fmt.Sprintf("0.0.0.0:%d", admin); cfg.Server.AdminAddr != want {
		t.Errorf("server.admin_addr %q, want %q (the probes' port)", cfg.Server.AdminAddr, want)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("no preStop sleep: %+v", c.Lifecycle)
	}
	pause := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	if grace < pause+cfg.Server.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + shutdown_timeout %v", grace, pause, cfg.Server.ShutdownTimeout)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].SubPath != "" || c.Args[len(c.Args)-1] != c.VolumeMounts[0].MountPath+"/layer0.yaml" {
		t.Errorf("config mount %+v, args %q: want the directory mounted and its layer0.yaml given", c.VolumeMounts, c.Args)
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("pod security context %+v: want runAsNonRoot", sc)
	}
}

func TestChartDefaults(t *testing.T) {
	r := render(t, "")
	if r.deployment == nil || r.service == nil || r.configMap == nil || r.hpa == nil || r.pdb == nil {
		t.Fatalf("default values rendered %v; want a Deployment, Service, ConfigMap, HPA and PDB", r.kinds)
	}
	if r.serviceMonitor != nil || len(r.secrets) != 0 {
		t.Errorf("default values rendered %v: no ServiceMonitor or Secret expected", r.kinds)
	}
	cfg := layer0Config(t, r)
	checkPod(t, r, cfg)
	if cfg.Store.Kind != config.StoreMemory || len(cfg.Keys) != 0 {
		t.Errorf("default store %q, %d keys; want memory and none (no key is known to all)", cfg.Store.Kind, len(cfg.Keys))
	}
	if r.deployment.Spec.Replicas != nil {
		t.Errorf("replicas set (%d) while the autoscaler owns them", *r.deployment.Spec.Replicas)
	}
}

func TestChartAllOptions(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "pw") // the chart's Secret sets it in the pod
	r := render(t, "testdata/all-options.yaml")
	if r.deployment == nil || r.service == nil || r.serviceMonitor == nil || r.pdb == nil {
		t.Fatalf("all options rendered %v", r.kinds)
	}
	if r.configMap != nil || r.hpa != nil {
		t.Errorf("all options (config in a Secret, fixed replicas) rendered %v", r.kinds)
	}
	cfg := layer0Config(t, r)
	checkPod(t, r, cfg)
	s := cfg.Store
	if s.Kind != config.StoreRedis || s.URL != "redis://redis-master.redis:6379" || s.OnError != config.OnErrorDeny ||
		s.Replicas != 4 || s.PasswordEnv != "REDIS_PASSWORD" || s.Timeout != 10*time.Millisecond ||
		!s.Cache.Enabled || s.Cache.MaxEntryBytes != 65536 || s.Cache.FillWait != 3*time.Second {
		t.Errorf("store %+v", s)
	}
	if got := cfg.Server.ShutdownTimeout; got != 2*time.Minute {
		t.Errorf("shutdown_timeout %v, want 2m", got)
	}
	if g := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 120+10+5 {
		t.Errorf("terminationGracePeriodSeconds %d, want 135", g)
	}
	if *r.deployment.Spec.Replicas != 4 {
		t.Errorf("replicas %d, want 4", *r.deployment.Spec.Replicas)
	}
	env := r.secrets["gw-layer0-env"]
	if env == nil || env.StringData["REDIS_PASSWORD"] == "" || env.StringData["VLLM_API_KEY"] == "" {
		t.Fatalf("env Secret %+v", env)
	}
	from := r.deployment.Spec.Template.Spec.Containers[0].EnvFrom
	if len(from) != 2 || from[0].SecretRef.Name != "gw-layer0-env" || from[1].SecretRef.Name != "engine-credentials" {
		t.Errorf("envFrom %+v", from)
	}
	if e := cfg.Engines["vllm"]; e.APIKeyEnv != "VLLM_API_KEY" {
		t.Errorf("engine vllm: %+v", e)
	}
	if ep := r.serviceMonitor.Spec.Endpoints; len(ep) != 1 || ep[0].Port != "admin" || ep[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v", ep)
	}
}

// TestValuesDocumented checks that every top-level field of values.yaml has a comment right above
// it: the file is the chart's reference.
func TestValuesDocumented(t *testing.T) {
	b, err := os.ReadFile("layer0/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	top := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*:`)
	n := 0
	for i, l := range lines {
		if !top.MatchString(l) {
			continue
		}
		n++
		if i == 0 || !strings.HasPrefix(lines[i-1], "#") && !top.MatchString(lines[i-1]) {
			t.Errorf("values.yaml line %d: %q has no comment above it", i+1, l)
		}
	}
	if n < 10 {
		t.Errorf("values.yaml: %d top-level fields, want the chart's settings", n)
	}
}
