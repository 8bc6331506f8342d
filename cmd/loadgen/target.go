package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// errRemote is wrapped by the refusal of a host that is not loopback.
var errRemote = errors.New("refusing a host that is not loopback")

// target is where the generator sends its requests.
type target struct {
	base string // scheme://host[:port] as given, without a trailing slash
	addr string // host:port to dial: a pinned loopback IP unless remote
	host string // host name or IP, for TLS server name checks
	tls  bool   // https
}

// resolveTarget checks the -url and returns where to send. The URL must be
// http or https with a host and no user, path, query or fragment (routes
// come from -clients).
//
// The host must be loopback: an IP in 127.0.0.0/8 or ::1, or "localhost"
// (or a name under .localhost) resolving only to loopback addresses, whose
// address is then pinned for the whole run. Any other host, including
// other names that happen to resolve to loopback, needs allowRemote. The
// reason is that this is a load tool: a mistyped or copied URL must not
// point a few thousand requests a second at someone's production server, so
// sending load elsewhere takes a deliberate flag.
func resolveTarget(ctx context.Context, raw string, allowRemote bool) (target, error) {
	if !strings.Contains(raw, "://") {
		return target{}, fmt.Errorf("-url %q: want scheme://host[:port], e.g. http://127.0.0.1:8080", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, fmt.Errorf("-url %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return target{}, fmt.Errorf("-url %q: scheme must be http or https", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return target{}, fmt.Errorf("-url %q: no host", raw)
	}
	if u.User != nil {
		return target{}, fmt.Errorf("-url %q: user information is not supported", raw)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return target{}, fmt.Errorf("-url %q: give only scheme://host[:port]; routes come from -clients", raw)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	t := target{
		base: u.Scheme + "://" + u.Host,
		addr: net.JoinHostPort(host, port),
		host: host,
		tls:  u.Scheme == "https",
	}
	if allowRemote {
		return t, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !ip.Unmap().IsLoopback() {
			return target{}, fmt.Errorf("%w: -url host %s; loadgen sends real load, so other hosts need -allow-remote", errRemote, host)
		}
		return t, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name != "localhost" && !strings.HasSuffix(name, ".localhost") {
		return target{}, fmt.Errorf("%w: -url host %q is not localhost or a loopback IP; loadgen sends real load, so other hosts need -allow-remote", errRemote, host)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return target{}, fmt.Errorf("-url %q: %v", raw, err)
	}
	var pin netip.Addr
	for _, ip := range ips {
		ip = ip.Unmap()
		if !ip.IsLoopback() {
			return target{}, fmt.Errorf("%w: %s resolves to %s; other hosts need -allow-remote", errRemote, host, ip)
		}
		// Prefer IPv4: servers often listen on 127.0.0.1 only.
		if !pin.IsValid() || (pin.Is6() && ip.Is4()) {
			pin = ip
		}
	}
	if !pin.IsValid() {
		return target{}, fmt.Errorf("-url %q: %s has no address", raw, host)
	}
	t.addr = net.JoinHostPort(pin.String(), port)
	return t, nil
}
