// Command runner runs ebbflow jobs defined in YAML.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "runner: not built yet (see issue 7)")
	os.Exit(1)
}
