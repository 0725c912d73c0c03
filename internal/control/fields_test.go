package control

import (
	"encoding/json"
	"slices"
	"testing"

	"softnet.dev/internal/vswitch/portkind"
)

// A port's options go to JSON as an object in the kind's order, an
// option given twice as one key, and read back in that order.
func TestFieldsJSON(t *testing.T) {
	fs := fieldsOf([]portkind.Field{{Key: "vni", Value: "42"}, {Key: "remote", Value: "198.18.0.2"}, {Key: "local", Value: "198.18.0.1"}, {Key: "remote", Value: "198.18.0.3"}})
	b, err := json.Marshal(struct {
		O Fields `json:"o"`
	}{fs})
	if err != nil || string(b) != `{"o":{"vni":"42","remote":"198.18.0.2,198.18.0.3","local":"198.18.0.1"}}` {
		t.Fatalf("%s, %v", b, err)
	}
	var back struct {
		O Fields `json:"o"`
	}
	if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back.O, fs) || back.O.String() != "vni=42,remote=198.18.0.2,198.18.0.3,local=198.18.0.1" || back.O.Get("local") != "198.18.0.1" {
		t.Errorf("read back %+v, %v", back.O, err)
	}
	if fieldsOf(nil) != nil {
		t.Error("no fields are not nil")
	}
	for _, bad := range []string{`[]`, `{"a": 1}`, `{"a": "b"`} {
		var f Fields
		if err := json.Unmarshal([]byte(bad), &f); err == nil {
			t.Errorf("%s read as %+v", bad, f)
		}
	}
}
