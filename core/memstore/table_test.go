package memstore

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkTable verifies t against model, the chains it should hold (head
// first): every chain is found from its home, no free slot lies between a
// chain's home and its slot, and the counts agree.
func checkTable(t *testing.T, tb *table, model map[uint64][]*entry) {
	t.Helper()
	used := 0
	mask := tb.mask()
	for i, s := range tb.slots {
		if s.e == nil {
			continue
		}
		used++
		for j := tb.home(s.h); j != uint64(i); j = (j + 1) & mask {
			if tb.slots[j].e == nil {
				t.Fatalf("slot %d (hash %#x, home %d): free slot %d on its probe path", i, s.h, tb.home(s.h), j)
			}
		}
	}
	require.Equal(t, len(model), used, "slots in use, one per chain of the model")
	require.Equal(t, used, tb.used, "the table's count of slots in use")
	for h, want := range model {
		var got []*entry
		for e := tb.get(h); e != nil; e = e.next {
			got = append(got, e)
		}
		if !slices.Equal(got, want) {
			require.Equal(t, len(want), len(got), "chain of %#x: entries", h)
			require.Fail(t, "chain out of order", "chain of %#x: the entries are not the model's, in its order", h)
		}
	}
}

// randomHash draws from few homes and few hashes per home, so that chains,
// collisions, clusters and wrap-around all happen.
func randomHash(r *rand.Rand) uint64 {
	return r.Uint64N(8)<<61 | r.Uint64N(40)
}

func TestTableAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		var tb table
		model := map[uint64][]*entry{}
		var all []struct {
			h uint64
			e *entry
		}
		for op := range 400 {
			switch x := r.IntN(10); {
			case x < 5 || len(all) == 0:
				h, e := randomHash(r), &entry{}
				tb.push(h, e)
				model[h] = append([]*entry{e}, model[h]...)
				all = append(all, struct {
					h uint64
					e *entry
				}{h, e})
			case x < 9:
				k := r.IntN(len(all))
				h, e := all[k].h, all[k].e
				all = slices.Delete(all, k, k+1)
				tb.unlink(h, e)
				chain := slices.DeleteFunc(model[h], func(x *entry) bool { return x == e })
				if len(chain) == 0 {
					delete(model, h)
				} else {
					model[h] = chain
				}
			default:
				require.Nil(t, tb.get(randomHash(r)|1<<40), "found a hash never pushed")
			}
			if op%7 == 0 || round < 10 {
				checkTable(t, &tb, model)
			}
		}
		checkTable(t, &tb, model)
	}
}

func TestTableGrowsAndShrinks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var tb table
	model := map[uint64][]*entry{}
	for range 10 * shrinkMin {
		h, e := r.Uint64(), &entry{}
		tb.push(h, e)
		model[h] = append([]*entry{e}, model[h]...)
		require.LessOrEqual(t, 4*tb.used, 3*len(tb.slots), "%d of %d slots used, above 3/4", tb.used, len(tb.slots))
	}
	checkTable(t, &tb, model)
	big := len(tb.slots)
	for h, chain := range model {
		if len(model) <= 10 {
			break
		}
		tb.unlink(h, chain[0])
		delete(model, h)
	}
	tb.shrink()
	require.Less(t, len(tb.slots), big, "slots after shrink")
	require.LessOrEqual(t, 2*tb.used, len(tb.slots), "after shrink: %d of %d slots used, above 1/2", tb.used, len(tb.slots))
	checkTable(t, &tb, model)
}

// TestSweepAgainstModel sweeps shards of random entries with clustered
// hashes and random expiries, and checks that exactly the live ones stay.
func TestSweepAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		var sh shard
		model := map[uint64][]*entry{}
		for range r.IntN(300) {
			h, e := randomHash(r), &entry{st: state{expires: r.Int64N(100)}}
			sh.insert(h, e, 0)
			model[h] = append([]*entry{e}, model[h]...)
		}
		now := r.Int64N(100)
		sh.sweep(now)
		n := 0
		for h, chain := range model {
			chain = slices.DeleteFunc(chain, func(e *entry) bool { return e.st.expires <= now })
			if len(chain) == 0 {
				delete(model, h)
			} else {
				model[h] = chain
				n += len(chain)
			}
		}
		checkTable(t, &sh.t, model)
		require.Equal(t, n, sh.n, "the shard's entry count")
	}
}
