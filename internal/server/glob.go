package server

import "strings"

// glob matches an IAM resource pattern p against s: '*' stands for any run
// of bytes, '?' for exactly one byte (ARNs are ASCII), every other byte for
// itself. There is no escape, as in IAM.
//
// It runs in time linear in len(p)+len(s) with no backtracking (a segment
// holding '?' costs ceil(len(segment)/64) words per byte of s): the pattern
// is cut at its stars into segments; the first segment must be a prefix of
// s, the last a suffix, and each middle segment is taken at its leftmost
// place after the previous one. Leftmost is always right for stars (taking a
// segment earlier only leaves more room for the rest), so no choice is ever
// revisited. The old recursive matcher tried every split for every star and
// took seconds on a path with a dozen stars.
func glob(p, s string) bool { return globCount(p, s, nil) }

// globCount is glob that adds the bytes it examined to *steps when steps is
// not nil, so a test can check that the work grows linearly.
func globCount(p, s string, steps *int) bool {
	star := strings.IndexByte(p, '*')
	if star < 0 {
		return len(p) == len(s) && segEqual(p, s, steps)
	}
	first, p := p[:star], p[star+1:]
	lastStar := strings.LastIndexByte(p, '*')
	last, middle := p[lastStar+1:], ""
	if lastStar >= 0 {
		middle = p[:lastStar]
	}
	if len(first)+len(last) > len(s) || !segEqual(first, s[:len(first)], steps) || !segEqual(last, s[len(s)-len(last):], steps) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for lastStar >= 0 {
		seg := middle
		if i := strings.IndexByte(middle, '*'); i >= 0 {
			seg, middle = middle[:i], middle[i+1:]
		} else {
			lastStar = -1
		}
		i := segIndex(rest, seg, steps)
		if i < 0 {
			return false
		}
		rest = rest[i+len(seg):]
	}
	return true
}

// segEqual compares a star-free segment with a text of the same length.
func segEqual(seg, s string, steps *int) bool {
	count(steps, len(seg))
	for i := 0; i < len(seg); i++ {
		if seg[i] != '?' && seg[i] != s[i] {
			return false
		}
	}
	return true
}

// segIndex returns the leftmost index of the star-free segment seg in s, or
// -1. A literal segment is found with Knuth-Morris-Pratt; one with '?' with
// bit-parallel Shift-And over ceil(len(seg)/64) words. Either way s is read
// once, left to right, and only up to the end of the match, so the scans of
// consecutive segments never overlap.
func segIndex(s, seg string, steps *int) int {
	switch {
	case seg == "":
		return 0
	case len(seg) > len(s):
		return -1
	case strings.IndexByte(seg, '?') < 0:
		return kmpIndex(s, seg, steps)
	default:
		return shiftAndIndex(s, seg, steps)
	}
}

// kmpIndex is Knuth-Morris-Pratt: at most 2·len(s) + 2·len(seg) comparisons.
func kmpIndex(s, seg string, steps *int) int {
	var buf [32]int
	fail := buf[:0]
	if len(seg) > len(buf) {
		fail = make([]int, len(seg))
	}
	fail = fail[:len(seg)]
	for i, k := 1, 0; i < len(seg); i++ {
		for k > 0 && seg[i] != seg[k] {
			k = fail[k-1]
			count(steps, 1)
		}
		if seg[i] == seg[k] {
			k++
		}
		fail[i] = k
		count(steps, 1)
	}
	for i, k := 0, 0; i < len(s); i++ {
		for k > 0 && s[i] != seg[k] {
			k = fail[k-1]
			count(steps, 1)
		}
		if s[i] == seg[k] {
			k++
		}
		count(steps, 1)
		if k == len(seg) {
			return i - len(seg) + 1
		}
	}
	return -1
}

// shiftAndIndex finds seg, which holds '?', by Shift-And: bit j of the state
// says that seg[:j+1] ends at the current byte of s.
func shiftAndIndex(s, seg string, steps *int) int {
	words := (len(seg) + 63) / 64
	// masks[0] is the mask of a byte that seg names nowhere (only the '?'
	// positions accept it); index[b] points at byte b's own mask, if any.
	var index [256]int32
	masks := make([]uint64, words, words*4)
	for j := 0; j < len(seg); j++ {
		if seg[j] == '?' {
			masks[j/64] |= 1 << (j % 64)
		}
	}
	for j := 0; j < len(seg); j++ {
		if b := seg[j]; b != '?' && index[b] == 0 {
			index[b] = int32(len(masks) / words)
			masks = append(masks, masks[:words]...)
			count(steps, words)
		}
	}
	for j := 0; j < len(seg); j++ {
		if b := seg[j]; b != '?' {
			masks[int(index[b])*words+j/64] |= 1 << (j % 64)
		}
	}
	count(steps, len(seg))
	state := make([]uint64, words)
	top, topBit := (len(seg)-1)/64, uint((len(seg)-1)%64)
	for i := 0; i < len(s); i++ {
		m := masks[int(index[s[i]])*words:][:words]
		carry := uint64(1) // a match may start at every byte
		for w := range state {
			next := state[w] >> 63
			state[w] = (state[w]<<1 | carry) & m[w]
			carry = next
		}
		count(steps, words)
		if state[top]&(1<<topBit) != 0 {
			return i - len(seg) + 1
		}
	}
	return -1
}

func count(steps *int, n int) {
	if steps != nil {
		*steps += n
	}
}
