package recovery

import "slices"

// Assign returns, for each of parts partitions, the index in members of
// the member that should own it: a deterministic function of the member
// ids and parts alone, so every process that read the same roster
// computes the same assignment without talking to the others.
//
// It is rendezvous (highest random weight) hashing with bounded loads:
// each partition goes to the member with the highest score for it among
// those with room left, and a member has room for parts/len(members)
// partitions, one more for the first parts%len(members) members in the
// order of members. So the most and the fewest partitions of two members
// differ by at most one, and a member joining or leaving moves few
// partitions besides its own share. members must be sorted and unique; an
// empty members gives nil.
func Assign(members []string, parts int) []int {
	n := len(members)
	if n == 0 || parts <= 0 {
		return nil
	}
	room := make([]int, n)
	for i := range room {
		room[i] = parts / n
		if i < parts%n {
			room[i]++
		}
	}
	seeds := make([]uint64, n)
	for i, m := range members {
		seeds[i] = fnv64(m)
	}
	owner := make([]int, parts)
	order := make([]int, n)
	for p := range parts {
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			sa, sb := mix(seeds[a], uint64(p)), mix(seeds[b], uint64(p))
			switch {
			case sa > sb:
				return -1
			case sa < sb:
				return 1
			}
			return a - b
		})
		for _, i := range order {
			if room[i] > 0 {
				room[i]--
				owner[p] = i
				break
			}
		}
	}
	return owner
}

// fnv64 is FNV-1a, 64 bits: stable across processes and versions.
func fnv64(s string) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return h
}

// mix is splitmix64's finaliser over a member's seed and a partition.
func mix(seed, p uint64) uint64 {
	z := seed ^ (p+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
