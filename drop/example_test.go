package drop_test

import (
	"encoding/json"
	"fmt"

	"softnet.dev/drop"
)

// Counters are plain arrays indexed by reason; their JSON form names the
// reasons that occurred, as `softnet ctl stats` shows them.
func Example() {
	var worker0, worker1 drop.Counts
	worker0[drop.NoRoute] += 2
	worker1[drop.IPRPFilter]++
	worker0.Add(&worker1) // summed when read
	out, _ := json.Marshal(worker0)
	fmt.Println(string(out), worker0.Total())

	r, err := drop.ParseReason("MAC_SPOOF")
	fmt.Println(uint8(r) != 0, r, err)
	// Output:
	// {"IP_RPFILTER":1,"NO_ROUTE":2} 3
	// true MAC_SPOOF <nil>
}
