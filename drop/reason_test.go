package drop

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestReasonNamesRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for r := Reason(0); r < NumReasons; r++ {
		name := r.String()
		if name == "" || seen[name] {
			t.Fatalf("reason %d: empty or duplicate name %q", r, name)
		}
		seen[name] = true
		got, err := ParseReason(name)
		if err != nil || got != r {
			t.Fatalf("ParseReason(%q) = %v, %v; want %v", name, got, err, r)
		}
	}
	if _, err := ParseReason("NO_SUCH_REASON"); err == nil {
		t.Fatal("ParseReason accepted an unknown name")
	}
	if got := NumReasons.String(); got != fmt.Sprintf("REASON_%d", uint8(NumReasons)) {
		t.Fatalf("out-of-range String = %q", got)
	}
}

func TestCountsJSON(t *testing.T) {
	var c Counts
	c[NoMem] = 3
	c[HdrTrunc] = 1
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"HDR_TRUNC":1,"NOMEM":3}` {
		t.Fatalf("json = %s", b)
	}
	var back Counts
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != c {
		t.Fatalf("round trip = %v, want %v", back, c)
	}
	if err := json.Unmarshal([]byte(`{"BOGUS":1}`), &back); err == nil {
		t.Fatal("unknown reason accepted")
	}
	var sum Counts
	sum.Add(&c)
	sum.Add(&c)
	if sum.Total() != 8 || sum[NoMem] != 6 {
		t.Fatalf("Add/Total = %v", sum)
	}
}
