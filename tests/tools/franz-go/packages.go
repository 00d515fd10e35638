// Package franzgo names the packages whose tests tests/tools/franz_go.py compiles, so
// `go mod tidy` keeps them (and every module their tests import) in go.mod and go.sum.
package franzgo

import (
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kgo"
)
