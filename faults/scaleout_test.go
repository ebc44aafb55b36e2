package faults

import (
	"os"
	"testing"
	"time"
)

// TestScaleOut runs two API instances, behind a round-robin balancer (every
// request of the workload and of the oracle goes to the next one), and two
// projector processes in each consumer group, on a 3-node Redis Cluster;
// partitions move while the workload runs, and the oracle (every home feed
// and author's posts through both APIs, and the followers read model:
// counts, following sets, the celebrity set) must find zero differences.
// The small run: a projector killed with kill -9 and another started in
// its place under the workload. With -faults.full also a projector
// joining, one leaving cleanly, an API killed, and the same on one
// redis-server (where the API's read cache is on).
func TestScaleOut(t *testing.T) {
	full := *flagFull || os.Getenv("FEED_FAULTS") == "full"
	run := runFilter(t)
	tops := []struct {
		name string
		top  topology
	}{{"Redis Cluster", topology{apis: 2, projects: 2, redisCluster: true}}}
	if full {
		tops = append(tops, struct {
			name string
			top  topology
		}{"one Redis", topology{apis: 2, projects: 2}})
	}
	for _, tc := range tops {
		t.Run(tc.name, func(t *testing.T) {
			users, workers, warm, timeout := 30, 4, 3*time.Second, 40*time.Second
			if full {
				users, workers, warm, timeout = 40, 6, 5*time.Second, 90*time.Second
			}
			c := startTopology(t, tc.top)
			s := newSuite(t, c, users, workers, warm, timeout)
			s.o.followers = true
			s.phase("none (warm-up)", func() {})
			phases := []struct {
				name   string
				inject func()
			}{
				{"kill -9 of a projector, another started", func() {
					c.kill(roleProject)
					time.Sleep(time.Second) // the fault: one projector fewer this long
					c.start(instance(roleProject, 3))
				}},
			}
			if full {
				phases = append(phases,
					struct {
						name   string
						inject func()
					}{"a projector joins", func() { c.start(instance(roleProject, 4)) }},
					struct {
						name   string
						inject func()
					}{"a projector leaves (SIGTERM)", func() { c.stop(instance(roleProject, 2)) }},
					struct {
						name   string
						inject func()
					}{"kill -9 of an API, started again", func() {
						c.kill(instance(roleAPI, 2))
						time.Sleep(2 * time.Second) // the fault: one API fewer this long
						c.start(instance(roleAPI, 2))
					}},
				)
			}
			for _, p := range phases {
				if run.MatchString(p.name) {
					s.phase(p.name, p.inject)
				}
			}
			s.finish()
		})
	}
}
