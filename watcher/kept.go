package watcher

import (
	"github.com/modwatch/modwatch/gitutil/mirror"
)

// keeper is a Mirror that says what the trees it handed out hold
// (the mirror's).
type keeper interface {
	Kept() mirror.KeptStats
}

// addKept adds what m's trees hold, when it says.
func (st *Stats) addKept(m Mirror) {
	if k, ok := m.(keeper); ok {
		ks := k.Kept()
		st.KeptTrees += ks.Trees
		st.KeptPackBytes += ks.PackBytes
	}
}
