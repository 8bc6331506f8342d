package mwtest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// This file is a small strict parser of structured field Lists (RFC 9651,
// "Structured Field Values for HTTP", which obsoletes RFC 8941), written
// for the tests from the parsing algorithms of its section 4.2, so that
// the IETF rate-limit fields are checked as a client library would read
// them, not by a pattern. It parses every type but Display Strings (RFC
// 9651 section 3.3.8), which it refuses; the middleware sends none.

// SFItem is a List member: a bare item or an inner list, and its
// parameters.
type SFItem struct {
	// Value is an int64 (Integer or Date), float64 (Decimal), string
	// (String), SFToken (Token), []byte (Byte Sequence), bool (Boolean) or
	// []SFItem (Inner List).
	Value any
	// Params are the parameters in order, each key once (a repeated key
	// keeps its first place and its last value, as RFC 9651 says).
	Params []SFParam
}

// SFParam is one parameter.
type SFParam struct {
	Key   string
	Value any // as SFItem.Value, never an inner list
}

// SFToken is a Token.
type SFToken string

// Param returns the value of the parameter named key, and whether there
// is one.
func (it SFItem) Param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

// ParseSFList parses a field value as a structured List (RFC 9651 section
// 4.2, with field type "list"): members separated by commas and optional
// whitespace, no trailing comma, nothing left over. An empty value is an
// empty List.
func ParseSFList(s string) ([]SFItem, error) {
	for _, c := range []byte(s) {
		if c > 0x7e || c < 0x20 && c != '\t' {
			return nil, fmt.Errorf("non-ASCII or control byte %#x", c)
		}
	}
	p := &sfParser{s: strings.TrimLeft(s, " ")}
	var out []SFItem
	for p.more() {
		it, err := p.itemOrInnerList()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.ows()
		if !p.more() {
			return out, nil
		}
		if p.next() != ',' {
			return nil, p.errorf("expected ',' after a list member")
		}
		p.i++
		p.ows()
		if !p.more() {
			return nil, p.errorf("trailing comma")
		}
	}
	return out, nil
}

// sfParser is the input and the position in it.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) more() bool { return p.i < len(p.s) }
func (p *sfParser) next() byte { return p.s[p.i] }

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at %d of %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

// ows discards optional whitespace (SP and HTAB).
func (p *sfParser) ows() {
	for p.more() && (p.next() == ' ' || p.next() == '\t') {
		p.i++
	}
}

// sp discards spaces.
func (p *sfParser) sp() {
	for p.more() && p.next() == ' ' {
		p.i++
	}
}

func (p *sfParser) itemOrInnerList() (SFItem, error) {
	if p.more() && p.next() == '(' {
		return p.innerList()
	}
	return p.item()
}

func (p *sfParser) innerList() (SFItem, error) {
	p.i++ // '('
	var items []SFItem
	for p.more() {
		p.sp()
		if p.more() && p.next() == ')' {
			p.i++
			params, err := p.params()
			return SFItem{Value: items, Params: params}, err
		}
		it, err := p.item()
		if err != nil {
			return SFItem{}, err
		}
		items = append(items, it)
		if !p.more() || p.next() != ' ' && p.next() != ')' {
			return SFItem{}, p.errorf("expected ' ' or ')' in an inner list")
		}
	}
	return SFItem{}, p.errorf("unterminated inner list")
}

func (p *sfParser) item() (SFItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return SFItem{}, err
	}
	params, err := p.params()
	return SFItem{Value: v, Params: params}, err
}

func (p *sfParser) params() ([]SFParam, error) {
	var out []SFParam
	for p.more() && p.next() == ';' {
		p.i++
		p.sp()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.more() && p.next() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range out {
			if out[j].Key == key {
				out[j].Value, replaced = v, true
			}
		}
		if !replaced {
			out = append(out, SFParam{Key: key, Value: v})
		}
	}
	return out, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if !p.more() || !(isLCAlpha(p.next()) || p.next() == '*') {
		return "", p.errorf("a key must start with a lowercase letter or '*'")
	}
	for p.more() && (isLCAlpha(p.next()) || isDigit(p.next()) || strings.IndexByte("_-.*", p.next()) >= 0) {
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if !p.more() {
		return nil, p.errorf("expected a bare item")
	}
	switch c := p.next(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token()
	case c == ':':
		return p.byteSeq()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		v, err := p.number()
		if _, ok := v.(int64); err == nil && !ok {
			return nil, p.errorf("a date must be an integer")
		}
		return v, err
	}
	return nil, p.errorf("unexpected %q (display strings are not supported)", p.next())
}

// number parses an Integer (int64, at most 15 digits) or a Decimal
// (float64, at most 12 integer and 1 to 3 fractional digits).
func (p *sfParser) number() (any, error) {
	start := p.i
	if p.next() == '-' {
		p.i++
	}
	digits, dot := 0, -1
scan:
	for ; p.more(); p.i++ {
		switch c := p.next(); {
		case isDigit(c):
			digits++
		case c == '.' && dot < 0 && digits > 0:
			if digits > 12 {
				return nil, p.errorf("decimal with more than 12 integer digits")
			}
			dot = digits
		default:
			break scan
		}
		if digits > 15 {
			return nil, p.errorf("number of more than 15 digits")
		}
	}
	if digits == 0 {
		return nil, p.errorf("expected a digit")
	}
	text := p.s[start:p.i]
	if dot < 0 {
		return strconv.ParseInt(text, 10, 64)
	}
	if frac := digits - dot; frac < 1 || frac > 3 {
		return nil, p.errorf("decimal with %d fractional digits", frac)
	}
	return strconv.ParseFloat(text, 64)
}

func (p *sfParser) str() (any, error) {
	p.i++ // '"'
	var b strings.Builder
	for p.more() {
		c := p.next()
		p.i++
		switch {
		case c == '\\':
			if !p.more() || p.next() != '"' && p.next() != '\\' {
				return nil, p.errorf("bad escape in a string")
			}
			b.WriteByte(p.next())
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("byte %#x in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errorf("unterminated string")
}

func (p *sfParser) token() (any, error) {
	start := p.i
	p.i++
	for p.more() && (isTChar(p.next()) || p.next() == ':' || p.next() == '/') {
		p.i++
	}
	return SFToken(p.s[start:p.i]), nil
}

func (p *sfParser) byteSeq() (any, error) {
	p.i++ // ':'
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.errorf("unterminated byte sequence")
	}
	enc := p.s[p.i : p.i+end]
	for _, c := range []byte(enc) {
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return nil, p.errorf("byte %q in a byte sequence", c)
		}
	}
	p.i += end + 1
	// Padding is optional: RFC 9651 asks parsers not to fail without it.
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "="))
	if err != nil {
		return nil, errors.Join(p.errorf("byte sequence"), err)
	}
	return b, nil
}

func (p *sfParser) boolean() (any, error) {
	p.i++ // '?'
	if !p.more() || p.next() != '0' && p.next() != '1' {
		return nil, p.errorf("a boolean is ?0 or ?1")
	}
	v := p.next() == '1'
	p.i++
	return v, nil
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || 'A' <= c && c <= 'Z' }

// isTChar reports whether c is a tchar (RFC 9110 section 5.6.2).
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
