package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterNodeTimeout is the cluster-node-timeout of the clusters
// StartCluster creates: a killed master is failed over within a few
// seconds.
const ClusterNodeTimeout = time.Second

// Cluster is a local Redis Cluster of 3 masters and 3 replicas, one
// redis-server process each, on free loopback ports.
type Cluster struct {
	// Addrs are the addresses of all six nodes, host:port on 127.0.0.1.
	Addrs []string

	t     testing.TB
	nodes map[string]*Server
}

// StartCluster starts six cluster-enabled redis-server processes (no
// persistence, cluster-node-timeout 1 s, replicas allowed to fail over
// whatever their replication lag), joins them with
// `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`, and
// waits until every node reports cluster_state:ok with all 16384 slots and
// every replica is linked to its master, every node agrees on the slots,
// and every master accepts a write to its slots. It takes about 3 s on an
// idle machine. The test's cleanup kills every process. It skips the test
// if redis-server or redis-cli is missing and fails it if the cluster is
// not ready within 60 s.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	RedisServerPath(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skipf("redistest: redis-cli is not on PATH (%v): skipping a Redis Cluster test", err)
	}
	c := &Cluster{t: t, nodes: make(map[string]*Server)}
	for range 6 {
		s := startClusterNode(t)
		c.Addrs = append(c.Addrs, s.Addr)
		c.nodes[s.Addr] = s
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitReady(60 * time.Second)
	return c
}

// startClusterNode starts one cluster-enabled node whose port and bus port
// (port+10000) are free.
func startClusterNode(t testing.TB) *Server {
	t.Helper()
	bin := RedisServerPath(t)
	s := &Server{t: t, bin: bin, dir: t.TempDir(), extra: []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout / time.Millisecond)),
		"--cluster-replica-validity-factor", "0",
		"--cluster-require-full-coverage", "no",
	}}
	t.Cleanup(s.Stop)
	var err error
	for range 3 {
		if s.port, err = freePort(true); err != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: starting a cluster node: %v", err)
	return nil
}

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID       string // node id
	Addr     string // host:port
	Master   bool   // flagged master
	Failed   bool   // flagged fail or pfail
	MasterID string // of a replica
	Slots    int    // number of slots served
	Ranges   string // the slots served, as CLUSTER NODES lists them
}

// Nodes returns the view of the cluster held by the node at addr.
func (c *Cluster) Nodes(addr string) ([]ClusterNode, error) {
	s, err := DoString(addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	var out []ClusterNode
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := ClusterNode{ID: f[0], Addr: f[1], MasterID: f[3]}
		if i := strings.IndexByte(n.Addr, '@'); i >= 0 {
			n.Addr = n.Addr[:i]
		}
		flags := f[2]
		n.Master = strings.Contains(flags, "master")
		n.Failed = strings.Contains(flags, "fail")
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			n.Ranges = strings.TrimPrefix(n.Ranges+" "+r, " ")
			lo, hi, ok := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if ok {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil {
				n.Slots += b - a + 1
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// Alive returns the addresses of the nodes whose process runs.
func (c *Cluster) Alive() []string {
	var out []string
	for _, a := range c.Addrs {
		if c.nodes[a].Pid() != 0 {
			out = append(out, a)
		}
	}
	return out
}

// Masters returns the addresses of the masters serving slots, as seen by a
// live node.
func (c *Cluster) Masters() []string {
	c.t.Helper()
	for _, a := range c.Alive() {
		nodes, err := c.Nodes(a)
		if err != nil {
			continue
		}
		var out []string
		for _, n := range nodes {
			if n.Master && !n.Failed && n.Slots > 0 {
				out = append(out, n.Addr)
			}
		}
		return out
	}
	c.t.Fatal("redistest: no live cluster node answers CLUSTER NODES")
	return nil
}

// ready reports whether every live node sees a healthy cluster: state ok,
// all slots served by 3 masters that are not failed, every live replica's
// link to its master up, and every node agreeing on which master serves
// which slots; and whether each of those masters accepts a write to one of
// its slots (a node that still answers CLUSTERDOWN or TRYAGAIN, or MOVED
// for a slot the others say it serves, is not ready yet).
func (c *Cluster) ready() error {
	var view, viewOf string // the slot map of the first live node
	owners := map[string]string{}
	for _, a := range c.Alive() {
		info, err := DoString(a, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("%s: cluster not ok", a)
		}
		nodes, err := c.Nodes(a)
		if err != nil {
			return err
		}
		masters := 0
		var slotMap []string
		for _, n := range nodes {
			if n.Master && !n.Failed && n.Slots > 0 {
				masters++
				slotMap = append(slotMap, n.ID+"@"+n.Addr+": "+n.Ranges)
				owners[n.Addr] = n.Ranges
			}
		}
		if masters != 3 {
			return fmt.Errorf("%s sees %d serving masters", a, masters)
		}
		slices.Sort(slotMap)
		if m := strings.Join(slotMap, "; "); view == "" {
			view, viewOf = m, a
		} else if m != view {
			return fmt.Errorf("%s and %s disagree on the slots: %s, and %s", viewOf, a, m, view)
		}
		repl, err := DoString(a, "INFO", "replication")
		if err != nil {
			return err
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("%s: replica link not up", a)
		}
	}
	for addr, ranges := range owners {
		key, err := keyInRanges(ranges)
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		if v, err := Do(addr, "SET", key, "1", "PX", "10000"); err != nil || v != "OK" {
			return fmt.Errorf("%s: SET %s (slot %d): %v, %v", addr, key, keySlot(key), v, err)
		}
	}
	return nil
}

// keyInRanges returns a key whose slot is in ranges ("0-5460 5462 ...",
// as CLUSTER NODES lists them).
func keyInRanges(ranges string) (string, error) {
	type span struct{ lo, hi int }
	var spans []span
	for _, r := range strings.Fields(ranges) {
		lo, hi, ok := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return "", fmt.Errorf("slot range %q", r)
		}
		b := a
		if ok {
			if b, err = strconv.Atoi(hi); err != nil {
				return "", fmt.Errorf("slot range %q", r)
			}
		}
		spans = append(spans, span{a, b})
	}
	for i := range 1 << 20 {
		key := "redistest:ready:" + strconv.Itoa(i)
		slot := keySlot(key)
		for _, sp := range spans {
			if sp.lo <= slot && slot <= sp.hi {
				return key, nil
			}
		}
	}
	return "", fmt.Errorf("no key found for slots %q", ranges)
}

// keySlot is Redis Cluster's slot of key: CRC-16/XMODEM of the key, or of
// its hash tag, mod 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := range len(key) {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// WaitReady waits until every live node sees a healthy cluster (see
// StartCluster), failing the test after timeout.
func (c *Cluster) WaitReady(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = c.ready(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("redistest: cluster not ready within %v: %v", timeout, err)
}

// KillMaster kills (SIGKILL) the master at addr and waits, at most 30 s,
// until one of its replicas has taken over its slots and every live node
// sees a healthy cluster again. It returns the address of the new master.
func (c *Cluster) KillMaster(addr string) string {
	c.t.Helper()
	return c.StopMaster(addr)()
}

// StopMaster kills (SIGKILL) the master at addr and returns once the
// process has exited, before any replica can take over (that takes at
// least ClusterNodeTimeout). The returned function waits, at most 30 s,
// until one of the master's replicas has taken over its slots and every
// live node sees a healthy cluster again, and returns the new master's
// address. Use it to act while the master is known to be down.
func (c *Cluster) StopMaster(addr string) (awaitTakeover func() string) {
	c.t.Helper()
	s := c.nodes[addr]
	if s == nil {
		c.t.Fatalf("redistest: %s is not a node of this cluster", addr)
	}
	nodes, err := c.Nodes(addr)
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	var id string
	var replicas []string
	for _, n := range nodes {
		if n.Addr == addr {
			id = n.ID
		}
	}
	for _, n := range nodes {
		if n.MasterID == id {
			replicas = append(replicas, n.Addr)
		}
	}
	if id == "" || len(replicas) == 0 {
		c.t.Fatalf("redistest: %s is not a master with a replica", addr)
	}
	s.Stop()
	return func() string {
		c.t.Helper()
		c.WaitReady(30 * time.Second)
		for _, a := range c.Masters() {
			for _, r := range replicas {
				if a == r {
					return a
				}
			}
		}
		c.t.Fatalf("redistest: no replica of %s became master", addr)
		return ""
	}
}
