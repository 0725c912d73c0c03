// Command build-apiserver builds kube-apiserver for the tests from the
// nested module internal/kubetest/apiserver into the cache, unless it is
// there already, and prints its path on stdout (progress goes to
// stderr). Tests find the cached binary by themselves:
//
//	go run ./internal/kubetest/cmd/build-apiserver
//
// With -o PATH it builds into PATH, cache or not, as CI does to build it
// once in every run; the tests then need SOFTNET_KUBE_APISERVER=PATH.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"softnet.dev/internal/kubetest"
)

func main() {
	out := flag.String("o", "", "build into this file instead of the cache, even if the cache has it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bin, err := kubetest.BuildAPIServer(ctx, os.Stderr, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
