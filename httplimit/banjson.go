package httplimit

import (
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit"
)

// banJSON is Ban's JSON form.
type banJSON struct {
	After  *int    `json:"after"`
	Within string  `json:"within"`
	For    string  `json:"for"`
	Growth float64 `json:"growth,omitempty"`
	Max    string  `json:"max,omitempty"`
}

// concurrencyJSON is Concurrency's JSON form.
type concurrencyJSON struct {
	Limit      *int   `json:"limit"`
	Status     int    `json:"status,omitempty"`
	RetryAfter string `json:"retry_after,omitempty"`
}

// banToJSON returns b's JSON form, nil for nil.
func banToJSON(b *Ban) *banJSON {
	if b == nil {
		return nil
	}
	j := &banJSON{After: &b.After, Within: b.Within.String(), For: b.For.String(), Growth: b.Growth}
	if b.Max != 0 {
		j.Max = b.Max.String()
	}
	return j
}

// concurrencyToJSON returns c's JSON form, nil for nil.
func concurrencyToJSON(c *Concurrency) *concurrencyJSON {
	if c == nil {
		return nil
	}
	j := &concurrencyJSON{Limit: &c.Limit, Status: c.Status}
	if c.RetryAfter != 0 {
		j.RetryAfter = c.RetryAfter.String()
	}
	return j
}

// fileDuration parses the duration s of field name of what; optional
// allows "".
func fileDuration(what, name, s string, optional bool) (time.Duration, error) {
	if s == "" {
		if optional {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: %s: missing %q", shardlimit.ErrInvalidConfig, what, name)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %s: %v", shardlimit.ErrInvalidConfig, what, name, err)
	}
	return d, nil
}

// policies decodes j's ban and concurrency into out, for the rule what;
// their ranges are checked by Validate.
func (j *ruleJSON) policies(what string, out *Rule) error {
	if b := j.Ban; b != nil {
		if b.After == nil {
			return fmt.Errorf("%w: %s: ban: missing \"after\"", shardlimit.ErrInvalidConfig, what)
		}
		v := Ban{After: *b.After, Growth: b.Growth}
		var err error
		if v.Within, err = fileDuration(what, "ban: within", b.Within, false); err != nil {
			return err
		}
		if v.For, err = fileDuration(what, "ban: for", b.For, false); err != nil {
			return err
		}
		if v.Max, err = fileDuration(what, "ban: max", b.Max, true); err != nil {
			return err
		}
		out.Ban = &v
	}
	if c := j.Concurrency; c != nil {
		if c.Limit == nil {
			return fmt.Errorf("%w: %s: concurrency: missing \"limit\"", shardlimit.ErrInvalidConfig, what)
		}
		v := Concurrency{Limit: *c.Limit, Status: c.Status}
		var err error
		if v.RetryAfter, err = fileDuration(what, "concurrency: retry_after", c.RetryAfter, true); err != nil {
			return err
		}
		out.Concurrency = &v
	}
	return nil
}
