package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caarlos0/env/v11"
)

// The tags of a field of Config (its doc comment is its description):
//
//	env         the variable, read by github.com/caarlos0/env
//	envDefault  the value when the variable is unset or blank
//	group       on the first field of a group: its title in docs/settings.md
//	by          the binaries and subcommands that use it (api, worker, migrate, ...)
//	needs       the field of Needs that makes it required; hint, what it holds
//	with        another variable: the setting is required, and checked, only
//	            while that one is set
//	min, max    the bounds of an integer, or of a duration (of each of a list)
//	oneof       the values it takes, comma-separated
//	scheme      the schemes of the URL it takes, comma-separated
//	check       addr: a listen address, host:port or :port
//	minLen      the fewest bytes it takes
//	verbatim    true: the value is taken as given, spaces around it included
//	            (every other value is trimmed, and a blank one is unset)
//	secret      true: a secret that is not of type Secret
//	accepts     what it takes, where the tags above cannot say it
//	docDefault  its default in docs/settings.md, where envDefault cannot say it
//
// Whatever the tags cannot express, a check between settings or a default
// computed from another, is in Load's relate.

// setting is one field of Config, with its tags read.
type setting struct {
	Name       string // the variable
	Field      string // the field of Config
	index      int
	typ        reflect.Type
	Default    string
	hasDefault bool
	Group      string
	By         []string
	needs      string
	hint       string
	with       string
	min, max   string
	oneof      []string
	schemes    []string
	check      string
	minLen     int
	verbatim   bool
	secret     bool
	acceptsTag string
	docDefault string
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	durationsType = reflect.TypeFor[[]time.Duration]()
	prefixesType  = reflect.TypeFor[[]netip.Prefix]()
	keyType       = reflect.TypeFor[[]byte]()
	limitType     = reflect.TypeFor[Limit]()
	levelType     = reflect.TypeFor[slog.Level]()
	secretType    = reflect.TypeFor[Secret]()
)

// settings reads the tags of Config once; a tag it cannot read is a bug
// of the declaration, and panics (every test of the package finds it).
var settings = sync.OnceValue(func() []setting {
	t := reflect.TypeFor[Config]()
	var out []setting
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if name == "" {
			panic("config: field " + f.Name + " has no env tag")
		}
		def, hasDef := f.Tag.Lookup("envDefault")
		s := setting{
			Name: name, Field: f.Name, index: i, typ: f.Type,
			Default: def, hasDefault: hasDef,
			Group:      f.Tag.Get("group"),
			By:         list(f.Tag.Get("by")),
			needs:      f.Tag.Get("needs"),
			hint:       f.Tag.Get("hint"),
			with:       f.Tag.Get("with"),
			min:        f.Tag.Get("min"),
			max:        f.Tag.Get("max"),
			oneof:      list(f.Tag.Get("oneof")),
			schemes:    list(f.Tag.Get("scheme")),
			check:      f.Tag.Get("check"),
			verbatim:   f.Tag.Get("verbatim") == "true",
			secret:     f.Type == secretType || f.Tag.Get("secret") == "true",
			acceptsTag: f.Tag.Get("accepts"),
			docDefault: f.Tag.Get("docDefault"),
		}
		if v := f.Tag.Get("minLen"); v != "" {
			s.minLen = must(strconv.Atoi(v))
		}
		if _, ok := reflect.TypeFor[Needs]().FieldByName(s.needs); s.needs != "" && !ok {
			panic("config: " + name + " needs " + s.needs + ", which is not a field of Needs")
		}
		if s.check != "" && s.check != "addr" {
			panic("config: " + name + " has an unknown check " + s.check)
		}
		s.intBounds() // bounds that do not parse panic here, not in Load
		s.minDuration()
		out = append(out, s)
	}
	for _, s := range out {
		if s.with != "" && !slices.ContainsFunc(out, func(o setting) bool { return o.Name == s.with }) {
			panic("config: " + s.Name + " is checked with " + s.with + ", which is not a setting")
		}
	}
	return out
})

func must[T any](v T, err error) T {
	if err != nil {
		panic("config: " + err.Error())
	}
	return v
}

// list splits a comma-separated tag.
func list(tag string) []string {
	if tag == "" {
		return nil
	}
	return strings.Split(tag, ",")
}

// intBounds are the bounds of an integer setting; no max is 0.
func (s setting) intBounds() (lo, hi int) {
	if s.typ.Kind() != reflect.Int || s.typ == levelType {
		return 0, 0
	}
	if s.min != "" {
		lo = must(strconv.Atoi(s.min))
	}
	if s.max != "" {
		hi = must(strconv.Atoi(s.max))
	}
	return lo, hi
}

// minDuration is the least a duration setting, or each of a list, takes.
func (s setting) minDuration() time.Duration {
	if s.min == "" || (s.typ != durationType && s.typ != durationsType) {
		return 0
	}
	return must(time.ParseDuration(s.min))
}

// accepts says in words what the setting takes: the problems of Load say
// "must be" and this.
func (s setting) accepts() string { return s.describe(func(v string) string { return v }) }

// describe says what the setting takes, passing each literal value
// through q (docs/settings.md sets them as code).
func (s setting) describe(q func(string) string) string {
	each := func(vs []string, suffix string) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = q(v + suffix)
		}
		return out
	}
	switch {
	case s.acceptsTag != "":
		return s.acceptsTag
	case len(s.oneof) > 0:
		return orList(each(s.oneof, ""))
	case len(s.schemes) > 0:
		return "a " + orList(each(s.schemes, "://")) + " URL"
	case s.check == "addr":
		return q("host:port") + " or " + q(":port")
	case s.minLen > 0:
		return fmt.Sprintf("at least %d bytes", s.minLen)
	}
	switch s.typ {
	case durationType:
		least := s.min
		if least == "" {
			least = "0s"
		}
		return "a duration of at least " + q(least)
	case durationsType:
		return "a comma-separated list of durations"
	case prefixesType:
		return "a comma-separated list of IP addresses and CIDRs"
	case keyType:
		return "32 bytes as 64 hex characters"
	case limitType:
		return q("N/duration") + ": at least 1 in a window of at least " + q("1s")
	case levelType:
		return orList(each([]string{"debug", "info", "warn", "error"}, ""))
	}
	switch s.typ.Kind() {
	case reflect.Bool:
		return q("true") + " or " + q("false")
	case reflect.Int:
		switch lo, hi := s.intBounds(); {
		case hi != 0:
			return fmt.Sprintf("an integer from %d to %d", lo, hi)
		case lo == 1:
			return "a positive integer"
		default:
			return fmt.Sprintf("an integer of at least %d", lo)
		}
	}
	return "any text"
}

// orList joins "a", "b", "c" as "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// mustBe is the problem of a value the setting does not take; the value is
// named only where that is safe and useful.
func (s setting) mustBe(v reflect.Value) string {
	msg := "must be " + s.accepts()
	switch {
	case s.typ == durationType || s.typ == durationsType:
		msg += " such as " + s.Default
	case s.minLen > 0 && v.IsValid():
		msg += fmt.Sprintf(", got %d", v.Len())
	case v.IsValid() && v.Kind() == reflect.String && !s.secret:
		msg += fmt.Sprintf(", got %q", v.String())
	}
	return msg
}

// parsers turn the values that github.com/caarlos0/env cannot parse as
// Gatehouse always has: every integer as strconv.Atoi does, lists whose
// items may have spaces around them, and the encryption key. Limit and
// slog.Level parse themselves (encoding.TextUnmarshaler).
var parsers = map[reflect.Type]env.ParserFunc{
	reflect.TypeFor[int](): func(v string) (any, error) { return strconv.Atoi(v) },
	durationsType: func(v string) (any, error) {
		var out []time.Duration
		for _, item := range strings.Split(v, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(item))
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		return out, nil
	},
	prefixesType: func(v string) (any, error) {
		var out []netip.Prefix
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			if prefix, err := netip.ParsePrefix(item); err == nil {
				out = append(out, prefix.Masked())
			} else if addr, err := netip.ParseAddr(item); err == nil {
				out = append(out, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			} else {
				return nil, fmt.Errorf("has %q, which is neither an IP address nor a CIDR", item)
			}
		}
		return out, nil
	},
	keyType: func(v string) (any, error) {
		k, err := hex.DecodeString(v)
		if err == nil && len(k) != 32 {
			err = fmt.Errorf("%d bytes", len(k))
		}
		return k, err
	},
}

// problems gathers what is wrong, at most one problem per variable.
type problems map[string]string

func (p problems) add(name, format string, args ...any) {
	if _, ok := p[name]; !ok {
		p[name] = fmt.Sprintf(format, args...)
	}
}

// Load reads the configuration through getenv and checks it against needs.
// The error, if any, names every problem in one line, in the order of
// docs/settings.md, and never a secret value.
func Load(getenv func(string) string, needs Needs) (Config, error) {
	all := settings()
	vars := make(map[string]string, len(all))
	for _, s := range all {
		v := getenv(s.Name)
		if !s.verbatim {
			v = strings.TrimSpace(v)
		}
		if v != "" {
			vars[s.Name] = v
		}
	}

	var c Config
	bad := problems{}
	byField := map[string]setting{}
	for _, s := range all {
		byField[s.Field] = s
	}
	err := env.ParseWithOptions(&c, env.Options{Environment: vars, FuncMap: parsers})
	var agg env.AggregateError
	if err != nil && !errors.As(err, &agg) {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	for _, e := range agg.Errors {
		var pe env.ParseError
		if !errors.As(e, &pe) {
			return Config{}, fmt.Errorf("config: %w", e) // a declaration the library refuses
		}
		s := byField[pe.Name]
		if s.typ == limitType || s.typ == prefixesType {
			bad.add(s.Name, "%v", pe.Err) // the parser's own words, with the value
		} else {
			bad.add(s.Name, "%s", s.mustBe(reflect.Value{}))
		}
	}

	fields := reflect.ValueOf(&c).Elem()
	for _, s := range all {
		if _, failed := bad[s.Name]; failed {
			continue
		}
		v := fields.Field(s.index)
		switch {
		case s.with != "" && vars[s.with] == "":
			// Checked only while the other setting is set.
		case s.with != "" && (vars[s.Name] == "" || !s.takes(v)):
			bad.add(s.Name, "must be %s when %s is set", s.accepts(), s.with)
		case vars[s.Name] == "" && !s.hasDefault:
			// Unset: the zero value, or a default relate computes.
			if s.needs != "" && reflect.ValueOf(needs).FieldByName(s.needs).Bool() {
				hint := s.hint
				if hint == "" {
					hint = s.accepts()
				}
				bad.add(s.Name, "is required (%s)", hint)
			}
		case !s.takes(v):
			bad.add(s.Name, "%s", s.mustBe(v))
		}
	}

	c.relate(vars, bad)

	if len(bad) > 0 {
		order := map[string]int{}
		for _, s := range all {
			order[s.Name] = s.index
		}
		names := make([]string, 0, len(bad))
		for name := range bad {
			names = append(names, name)
		}
		sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })
		msgs := make([]string, len(names))
		for i, name := range names {
			msgs[i] = name + " " + bad[name]
		}
		return Config{}, errors.New("invalid configuration: " + strings.Join(msgs, "; "))
	}
	return c, nil
}

// takes reports whether the parsed value v is one the setting takes; an
// empty string is (required settings are checked apart).
func (s setting) takes(v reflect.Value) bool {
	switch s.typ {
	case durationType:
		return time.Duration(v.Int()) >= s.minDuration()
	case durationsType:
		for _, d := range v.Interface().([]time.Duration) {
			if d < s.minDuration() {
				return false
			}
		}
		return true
	}
	if s.typ.Kind() == reflect.Int && s.typ != levelType {
		lo, hi := s.intBounds()
		n := int(v.Int())
		return n >= lo && (hi == 0 || n <= hi)
	}
	if v.Kind() != reflect.String || v.String() == "" {
		return true
	}
	str := v.String()
	switch {
	case len(s.oneof) > 0:
		return slices.Contains(s.oneof, str)
	case len(s.schemes) > 0:
		u, err := url.Parse(str)
		return err == nil && slices.Contains(s.schemes, u.Scheme)
	case s.check == "addr":
		return isListenAddr(str)
	case s.minLen > 0:
		return len(str) >= s.minLen
	}
	return true
}

// Variables names every variable Load reads, in the order of
// docs/settings.md.
func Variables() []string {
	var out []string
	for _, s := range settings() {
		out = append(out, s.Name)
	}
	return out
}

// accepts is what the setting named takes, in words.
func accepts(name string) string {
	i := slices.IndexFunc(settings(), func(s setting) bool { return s.Name == name })
	return settings()[i].accepts()
}

// isListenAddr reports whether addr is host:port or :port.
func isListenAddr(addr string) bool {
	_, port, ok := strings.Cut(addr, ":")
	return ok && port != ""
}

// sameListener reports whether the listen addresses a and b would bind
// one port: they are the same and name a port, not 0, which takes any free
// port for each listener.
func sameListener(a, b string) bool {
	_, port, err := net.SplitHostPort(a)
	return a == b && (err != nil || port != "0")
}

// relate makes the checks between settings and the defaults computed from
// others; a setting already found bad is left alone.
func (c *Config) relate(vars map[string]string, bad problems) {
	ok := func(name string) bool { _, failed := bad[name]; return !failed }

	if c.APIMetricsAddr != "" && ok("API_METRICS_ADDR") && sameListener(c.APIMetricsAddr, c.HTTPAddr) {
		bad.add("API_METRICS_ADDR", "must differ from HTTP_ADDR (leave it empty to serve /metrics on HTTP_ADDR)")
	}
	if c.ProbeAddr != "" && ok("PROBE_ADDR") && (sameListener(c.ProbeAddr, c.HTTPAddr) || sameListener(c.ProbeAddr, c.APIMetricsAddr)) {
		bad.add("PROBE_ADDR", "must differ from HTTP_ADDR and API_METRICS_ADDR (leave it empty to serve the probes on HTTP_ADDR only)")
	}

	if c.PublicURL == "" {
		c.PublicURL = defaultPublicURL(c.HTTPAddr)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
		bad.add("PUBLIC_URL", "must be %s (e.g. https://pay.example.com)", accepts("PUBLIC_URL"))
	}

	if vars["MAX_CONCURRENT_HASHES"] == "" {
		c.MaxConcurrentHashes = DefaultMaxConcurrentHashes()
	}

	if c.DefaultProvider == "stripe" && c.StripeSecretKey == "" {
		bad.add("STRIPE_SECRET_KEY", "is required when DEFAULT_PROVIDER is stripe")
	}

	// A delivery is kept at least as long as its retries can go on: one
	// dropped while pending would leave its task behind.
	if ok("WEBHOOK_RETRY_SCHEDULE") && ok("WEBHOOK_LOG_RETENTION") {
		var retrying time.Duration
		for _, d := range c.WebhookRetrySchedule {
			retrying += d
		}
		if c.WebhookLogRetention > 0 && c.WebhookLogRetention < retrying {
			bad.add("WEBHOOK_LOG_RETENTION", "must be at least the sum of WEBHOOK_RETRY_SCHEDULE (%s)", retrying)
		}
	}
}

// HTTPBound records the address the API bound HTTP_ADDR to (host:port): a
// PUBLIC_URL left to its default then names the port bound, which differs
// from HTTP_ADDR's when that is 0 (any free port).
func (c *Config) HTTPBound(addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || c.PublicURL != defaultPublicURL(c.HTTPAddr) {
		return
	}
	host, _, _ := net.SplitHostPort(c.HTTPAddr)
	c.PublicURL = defaultPublicURL(net.JoinHostPort(host, port))
}

// defaultPublicURL is the API's own address on loopback: right for a local
// stack, and replaced by PUBLIC_URL behind a load balancer.
func defaultPublicURL(httpAddr string) string {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil || port == "" {
		return "http://127.0.0.1:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
