package config

import (
	"strings"
	"testing"
	"time"
)

func TestAdmissionDefaults(t *testing.T) {
	c, err := Parse([]byte("admission: {enabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Admission
	if !a.Enabled || a.MaxQueue != DefaultAdmissionMaxQueue || a.MaxQueueBytes != DefaultAdmissionMaxQueueBytes ||
		a.MaxUtilization != 1 || a.PollInterval != DefaultAdmissionPollInterval || a.DefaultBand != "standard" {
		t.Fatalf("%+v", a)
	}
	if got := strings.Join(a.SortedBands(), ","); got != "interactive,standard,batch" {
		t.Fatalf("bands %s", got)
	}
	if b := a.Bands["batch"]; !b.Sheddable || b.MaxWait != 120*time.Second {
		t.Fatalf("batch %+v", b)
	}
	if Default().Admission.Enabled {
		t.Fatal("admission is on by default")
	}
	sim := Engine{Kind: KindSim, Sim: Sim{MaxConcurrency: 4}}
	if sim.AdmissionCap() != 4 || (&Engine{Kind: KindOpenAI}).AdmissionCap() != 0 {
		t.Fatal("AdmissionCap")
	}
}

func TestAdmissionValidate(t *testing.T) {
	_, err := Parse([]byte(`
admission:
  enabled: true
  default_band: gold
  max_utilization: 2
  bands:
    a: {priority: 1}
    b: {priority: 1, max_wait: -1s}
keys:
  - {name: k, hash: "` + strings.Repeat("a", 64) + `", priority: silver, allow_priority: [a, bronze], weight: -1}
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"admission.default_band", "admission.max_utilization", "admission.bands.b.priority",
		"admission.bands.b.max_wait", "keys[0].priority", "keys[0].allow_priority[1]", "keys[0].weight"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %s: %v", want, err)
		}
	}
}
