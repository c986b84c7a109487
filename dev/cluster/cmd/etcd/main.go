// Command etcd is etcd's server built from the Go module proxy (etcd's own
// module cannot be `go install`ed because of its replace directives).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
