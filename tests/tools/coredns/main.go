// CoreDNS for the one-node cluster (make cluster), built by tests/tools/cluster_dns.py.
//
// CoreDNS's own main with only the plugins the node's Corefile names
// (tests/support/cluster/configs.py: bind, errors, kubernetes, cache), as CoreDNS's
// docs build a custom server: the default set pulls in the cloud providers' SDKs
// (Azure, AWS, Google, Datadog...): 64% more compile CPU, six times the downloads.
// Directive order comes from core/dnsserver, so only the imports below change.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func main() {
	coremain.Run()
}
