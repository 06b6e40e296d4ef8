package mirror

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"

	"github.com/modwatch/modwatch/gitutil"
)

// FetchListed is [Mirror.Fetch] for refs whose objects a listing just
// named (ref name → the object it points at, as [RefList.Refs] has it).
// Over smart HTTP(S), into a mirror that already has history, it asks for
// those objects in one request, without asking the remote for its refs
// again: go-git's fetch starts with a full ref advertisement, which costs a
// round trip and, on a remote with many refs, most of the bytes of a poll.
// When that request fails (a ref moved since the listing, a server that
// refuses it), and everywhere else, it fetches as Fetch does. The refs are
// set to the listed objects.
func (m *Mirror) FetchListed(ctx context.Context, auth *gitutil.Auth, listedH map[string]gitutil.Hash) (FetchResult, error) {
	listed := make(map[string]plumbing.Hash, len(listedH))
	for n, h := range listedH {
		listed[n] = plumbing.Hash(h)
	}
	names := make([]string, 0, len(listed))
	for n := range listed {
		names = append(names, n)
	}
	sort.Strings(names)
	return m.fetchRefs(ctx, auth, names, listed)
}

// directFetchable reports whether the mirror can fetch listed objects in
// one upload-pack request: over HTTP(S), into a full (not shallow, not
// empty) mirror. Callers hold m.mu.
func (m *Mirror) directFetchable() bool {
	e, err := gitutil.ParseURL(m.url)
	if err != nil || (e.Scheme != "http" && e.Scheme != "https") || m.opts.FirstFetchDepth > 0 {
		return false
	}
	return !m.isEmpty()
}

// fetchDirect sends one upload-pack request for the listed objects the
// mirror lacks (wants), with the mirror's ref tips as haves, stores the
// pack and points the refs at the listed objects. It reports whether a pack
// was received. Callers hold m.mu.
func (m *Mirror) fetchDirect(ctx context.Context, topts gitutil.Transport, listed map[string]plumbing.Hash) (bool, error) {
	var wants []plumbing.Hash
	for _, h := range listed {
		if h.IsZero() {
			return false, fmt.Errorf("a listed ref has no object")
		}
		if m.repo.Storer.HasEncodedObject(h) != nil && !slices.Contains(wants, h) {
			wants = append(wants, h)
		}
	}
	fetched := false
	if len(wants) > 0 {
		if err := m.uploadPack(ctx, topts, wants); err != nil {
			return false, err
		}
		fetched = true
	}
	for name, h := range listed {
		if err := m.repo.Storer.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(name), h)); err != nil {
			return fetched, err
		}
	}
	return fetched, nil
}

// uploadPack asks the remote for wants and stores the pack it sends.
func (m *Mirror) uploadPack(ctx context.Context, topts gitutil.Transport, wants []plumbing.Hash) (err error) {
	m.sent.Add(2)
	ep, err := transport.NewEndpoint(m.url)
	if err != nil {
		return err
	}
	ep.CaBundle, ep.InsecureSkipTLS, ep.Proxy = topts.CABundle, topts.InsecureSkipTLS, topts.Proxy
	cl, err := client.NewClient(ep)
	if err != nil {
		return err
	}
	sess, err := cl.NewUploadPackSession(ep, topts.Method)
	if err != nil {
		return m.rateLimit(err)
	}
	defer sess.Close()

	req := packp.NewUploadPackRequest()
	// What every git server has offered since 2006; a server ignores what
	// it does not know. No multi_ack: one round, ended by "done". A thin
	// pack (deltas against what the mirror has) is completed before it is
	// stored (see storeThinPack); go-git's own fetch does not ask for one.
	for _, c := range []capability.Capability{capability.OFSDelta, capability.ThinPack, capability.Sideband64k} {
		if err := req.Capabilities.Set(c); err != nil {
			return err
		}
	}
	if err := req.Capabilities.Set(capability.Agent, capability.DefaultAgent()); err != nil {
		return err
	}
	req.Wants = wants
	refs, err := m.repo.References()
	if err != nil {
		return err
	}
	seen := map[plumbing.Hash]bool{}
	_ = refs.ForEach(func(r *plumbing.Reference) error {
		if r.Type() == plumbing.HashReference && !seen[r.Hash()] {
			seen[r.Hash()] = true
			req.Haves = append(req.Haves, r.Hash())
		}
		return nil
	})
	resp, err := sess.UploadPack(ctx, req)
	if err != nil {
		return m.rateLimit(err)
	}
	defer func() {
		if cerr := resp.Close(); err == nil {
			err = cerr
		}
	}()
	d := sideband.NewDemuxer(sideband.Sideband64k, resp)
	d.Progress = progressWriter{&m.progress}
	return m.storeThinPack(d)
}
