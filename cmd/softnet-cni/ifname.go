package main

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"softnet.dev/tun"
)

// checkIfName refuses a CNI_IFNAME that the switch cannot be given as
// its port's device name, before the switch is asked anything: one
// Linux refuses (package tun's rules, which the CNI library checks in
// part), and one holding ',' or '=', which Linux takes but a port spec
// cannot: "eth0,router=on" would reach the switch as the device eth0
// and an option of the port. As the CNI spec wants for a variable that
// is not valid, it is error 4, naming the variable.
func checkIfName(name string) error {
	why := ""
	if strings.ContainsAny(name, ",=") {
		why = "',' and '=' separate a port's options on the switch"
	} else if err := (tun.Config{Name: name}).Validate(); err != nil {
		why = strings.TrimPrefix(err.Error(), "tun "+name+": ")
	}
	if why == "" {
		return nil
	}
	return types.NewError(types.ErrInvalidEnvironmentVariables,
		fmt.Sprintf("CNI_IFNAME=%q: %s; want an interface name of at most %d bytes without '/', ':', ',', '=', '%%' or white space", name, why, tun.MaxNameLen), "")
}
