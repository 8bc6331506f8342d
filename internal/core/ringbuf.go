package core

// ringPool holds the ring buffers of one shard's SlidingLog keys in pages of
// pointer-free memory, so a million rings cost the garbage collector a few
// hundred page pointers, not a million slices. Shared pages grow from 1 KiB
// to 256 KiB.
//
// A ring is named by a ref: page index << 16 | word offset in the page. Rings
// of up to ringPageWords/4 words are carved from shared pages and recycled
// through per-capacity free lists; larger rings get a page of their own.
// Ring capacities are powers of two up to the key's limit, then the limit
// itself, so a full ring wastes nothing.
type ringPool struct {
	pages     [][]uint32
	freeRings map[uint32][]uint32 // capacity -> refs of free rings
	freePages []uint32            // indexes of released own pages
	cur       int                 // index of the shared page being carved, -1 if none
	used      int                 // words carved from pages[cur]
	liveWords int                 // words in rings in use
	freeWords int                 // words in free lists
	// excess holds, by ring ref, the units an overdraft charged beyond its
	// ring's room (see slidingLog.overdraw): its oldest stamp holds them,
	// besides its own. Nil while no ring of the shard has any, so the keys
	// that never overdraw pay a nil check, and no memory.
	excess map[uint32]excess
}

// excess is the units a ring's oldest stamp holds besides its own, as
// long as that stamp, stamp, is the oldest (a peek's copy of a key's
// record may have dropped it: the units expired with it).
type excess struct{ stamp, units uint32 }

const (
	ringPageWords  = 1 << 16 // largest shared page
	ringFirstWords = 1 << 8  // first shared page; each next one doubles
	ringMaxShared  = ringPageWords / 4
	maxRingPages   = 1 << 16
)

// alloc returns a ref to a ring of capacity c > 0, or false if the shard
// already holds maxRingPages pages.
func (p *ringPool) alloc(c uint32) (uint32, bool) {
	p.liveWords += int(c)
	if c > ringMaxShared {
		idx, ok := p.newPage(int(c))
		if !ok {
			p.liveWords -= int(c)
		}
		return idx << 16, ok
	}
	if refs := p.freeRings[c]; len(refs) > 0 {
		ref := refs[len(refs)-1]
		p.freeRings[c] = refs[:len(refs)-1]
		p.freeWords -= int(c)
		clear(p.ring(ref, c))
		return ref, true
	}
	if p.pages == nil || p.cur < 0 || p.used+int(c) > len(p.pages[p.cur]) {
		// Shared pages start small and double, so a shard with few rings
		// holds little memory and one with many holds few pages.
		words := ringFirstWords
		if p.pages != nil && p.cur >= 0 {
			words = min(2*len(p.pages[p.cur]), ringPageWords)
		}
		for words < int(c) {
			words *= 2
		}
		idx, ok := p.newPage(words)
		if !ok {
			p.liveWords -= int(c)
			return 0, false
		}
		p.cur, p.used = int(idx), 0
	}
	ref := uint32(p.cur)<<16 | uint32(p.used)
	p.used += int(c)
	return ref, true
}

func (p *ringPool) newPage(words int) (uint32, bool) {
	if n := len(p.freePages); n > 0 {
		idx := p.freePages[n-1]
		p.freePages = p.freePages[:n-1]
		p.pages[idx] = make([]uint32, words)
		return idx, true
	}
	if len(p.pages) >= maxRingPages {
		return 0, false
	}
	if p.pages == nil {
		p.cur = -1
	}
	p.pages = append(p.pages, make([]uint32, words))
	return uint32(len(p.pages) - 1), true
}

// free returns the ring ref of capacity c to the pool.
func (p *ringPool) free(ref, c uint32) {
	p.liveWords -= int(c)
	if c > ringMaxShared {
		p.pages[ref>>16] = nil
		p.freePages = append(p.freePages, ref>>16)
		return
	}
	if p.freeRings == nil {
		p.freeRings = make(map[uint32][]uint32)
	}
	p.freeRings[c] = append(p.freeRings[c], ref)
	p.freeWords += int(c)
}

// ring returns the words of ring ref of capacity c.
func (p *ringPool) ring(ref, c uint32) []uint32 {
	off := ref & 0xFFFF
	return p.pages[ref>>16][off : off+c : off+c]
}

// wasteful reports whether free rings hold more memory than live ones, worth
// a compaction.
func (p *ringPool) wasteful() bool {
	return p.freeWords > p.liveWords && p.freeWords >= ringFirstWords
}
