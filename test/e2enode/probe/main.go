// Command probe is the only program of the real-node test's image. "pause"
// is the pod sandbox; "check" prints what the container got (the variables
// gpufabric and NVIDIA set, and what each path named on the command line
// is), then "alive <n>" every 500 ms until SIGTERM.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if len(os.Args) < 2 || os.Args[1] == "pause" {
		<-stop
		return
	}
	report := map[string]any{"env": env(), "files": files(os.Args[2:])}
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
	tick := time.NewTicker(500 * time.Millisecond)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
			fmt.Printf("alive %d\n", n)
		}
	}
}

func env() map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GPUFABRIC_") || strings.HasPrefix(k, "NCCL_") || strings.HasPrefix(k, "NVIDIA_") {
			out[k] = v
		}
	}
	return out
}

// files describes each path: "char <major>:<minor>", "file", "dir",
// "symlink -> <target>" or "missing".
func files(paths []string) map[string]string {
	sort.Strings(paths)
	out := map[string]string{}
	for _, p := range paths {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			out[p] = "missing"
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[p] = "symlink -> " + target
		case fi.Mode()&os.ModeCharDevice != 0:
			st := fi.Sys().(*syscall.Stat_t)
			out[p] = fmt.Sprintf("char %d:%d", (st.Rdev>>8)&0xfff, (st.Rdev&0xff)|((st.Rdev>>12)&0xfff00))
		case fi.IsDir():
			out[p] = "dir"
		default:
			out[p] = "file"
		}
	}
	return out
}
