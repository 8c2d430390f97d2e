// Generates tests/unit/scheduler/data/go_sort_slice.json: for random pods, the order Go's sort.Slice
// leaves them in under kube-scheduler's MoreImportantPod. A pod without a start time (0) starts "now",
// read afresh for each of the two pods compared, so between two such pods of one priority the
// comparison holds both ways.
//
//	go run go_sort_slice.go > go_sort_slice.json   (Go 1.19.8, as kube-scheduler 1.20.2 is built here)
package main

import (
	"encoding/json"
	"math/rand"
	"os"
	"sort"
)

type sample struct {
	Priority []int   `json:"priority"`
	Start    []int64 `json:"start"`
	Order    []int   `json:"order"`
}

func main() {
	rng := rand.New(rand.NewSource(20261127))
	var out []sample
	for n := 0; n < 120; n++ {
		length := 1 + n // every length up to 60, then random ones up to 160
		if n >= 60 {
			length = 1 + rng.Intn(160)
		}
		s := sample{make([]int, length), make([]int64, length), make([]int, length)}
		priorities := 1 + rng.Intn(4)
		started := rng.Intn(3) // none, some or all pods started
		for i := 0; i < length; i++ {
			s.Priority[i] = rng.Intn(priorities) * 100
			if started == 2 || (started == 1 && rng.Intn(2) == 0) {
				s.Start[i] = 1 + int64(rng.Intn(5))
			}
			s.Order[i] = i
		}
		more := func(a, b int) bool {
			if s.Priority[a] != s.Priority[b] {
				return s.Priority[a] > s.Priority[b]
			}
			if s.Start[a] == 0 {
				return s.Start[b] == 0
			}
			return s.Start[b] == 0 || s.Start[a] < s.Start[b]
		}
		sort.Slice(s.Order, func(i, j int) bool { return more(s.Order[i], s.Order[j]) })
		out = append(out, s)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
