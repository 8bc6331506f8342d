package mwengine

import "github.com/shardlimit/shardlimit/httplimit"

// shadowOf returns the shadow rule for a request in tier t (resolved by
// tierOf) of method and path, or nil: t's best match among its shadow
// rules, else the default tier's, as for enforced rules (matchRules).
func shadowOf[S byteseq](set *ruleSet, t *tier, method, path S) *rule {
	if t.shadow != nil {
		if r := matchTier(t.shadow, method, path); r != nil {
			return r
		}
	}
	if t == set.def || set.def.shadow == nil {
		return nil
	}
	return matchTier(set.def.shadow, method, path)
}

// matchRules returns the identity q is keyed by (empty for one ignored,
// see KeyConfig.UnknownIdentity), the enforced rule q matches and the
// shadow rule (nil if none), in the tier the tier hook (q.Tier), else the
// identity, else the network gives. A request with neither identity nor
// tier hook, under rules without networks, is in the default tier: it
// skips the lookups (the allowed path's common case). A tier without a
// rule for the request leaves it to the default tier's rules.
func matchRules[S byteseq](e *Engine, set *ruleSet, q *Request[S]) (id S, r, sh *rule) {
	id, t := q.Identity, set.def
	if len(id) > 0 || q.Tier != "" || len(set.nets) > 0 {
		id, t = requestTier(e, set, q)
	}
	r = matchTier(t, q.Method, q.Path)
	if r == nil && t != set.def {
		r = matchTier(set.def, q.Method, q.Path)
	}
	if set.shadows {
		sh = shadowOf(set, t, q.Method, q.Path)
	}
	return id, r, sh
}

// requestTier returns the identity q is keyed by and q's tier (see
// matchRules).
func requestTier[S byteseq](e *Engine, set *ruleSet, q *Request[S]) (S, *tier) {
	id := q.Identity
	idTier, known := lookupID(set, id)
	if !known && e.keys.unknownID == httplimit.UnknownIdentityAnonymous {
		id = id[:0] // keyed as a request without identity
	}
	if q.Tier != "" {
		idTier = e.tierNamed(set, q.Tier, idTier)
	}
	return id, tierOf(set, idTier, q.Client)
}

// decideShadow decides request q, of key identity id, on shadow rule s:
// counted by s's limiter (Denied: its would-denials) and lists, never
// answered. built tells whether sc.lkey holds the request's limiter key
// already (under another rule's namespace, which has the length of s's);
// else it is built here. A failure counts as s's error and nothing more.
func decideShadow[S byteseq](e *Engine, sc *Scratch, s *rule, q *Request[S], id S, built bool) {
	if ls := s.lists; ls != nil {
		switch {
		case has(&ls.deny, q.Identity, q.Client):
			s.l.pol.denyListed.Add(1)
			return
		case has(&ls.exempt, q.Identity, q.Client):
			s.l.pol.exempt.Add(1)
			return
		}
	}
	if q.Cost < 0 {
		s.l.badCost.Add(1)
		return
	}
	lkey := sc.lkey
	if built {
		copy(lkey, s.l.ns)
	} else {
		var ok bool
		lkey, ok = buildKey(&e.keys, append(lkey[:0], s.l.ns...), id, q.Client)
		sc.lkey = lkey
		if !ok {
			s.l.noID.Add(1)
			return
		}
	}
	if res := s.l.lim.AllowBytesN(lkey, q.Now, q.Cost); res.Err != nil {
		s.l.countError(res.Err)
	}
}

// splitShadow returns the enforced rules of rules and the shadow ones.
func splitShadow(rules []httplimit.Rule) (enforced, shadow []httplimit.Rule) {
	for _, ru := range rules {
		if ru.Shadow {
			shadow = append(shadow, ru)
		} else {
			enforced = append(enforced, ru)
		}
	}
	return enforced, shadow
}

// routePolicies records in ns the rule set's lists of r and whether any of
// ns's rules is a shadow rule.
func (ns *ruleSet) routePolicies(r *httplimit.Rules) {
	ns.lists = compileLists(r.Exempt, r.Deny)
	for _, ru := range ns.rules {
		ns.shadows = ns.shadows || ru.shadow
	}
}

// policyStats adds the engine's list and tier hook counters to st.
func (e *Engine) policyStats(st *httplimit.Stats) {
	st.Exempt = e.listCounts.exempt.Load()
	st.DenyListed = e.listCounts.denyListed.Load()
	st.UnknownTier = e.listCounts.unknownTier.Load()
}
