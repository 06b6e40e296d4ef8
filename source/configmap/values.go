package configmap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
)

// maxValuesFile bounds a reference file read.
const maxValuesFile = 1 << 20

// GitValues reads a [Reference]'s files from their repositories, at their
// revisions as they are now, through mirrors kept under dir (one per
// repository and credential, fetched incrementally), with the
// credentials resolve finds for each URL (nil: none). Each file is a map
// of cluster names to key/value pairs; a file without the cluster gives
// nothing, a later file's values override an earlier's, and a file that
// cannot be read or parsed is an error naming it. Each listing and fetch
// is bounded by timeout.
func GitValues(dir string, resolve gitutil.CredentialResolver, timeout time.Duration) Values {
	g := &gitReader{dir: dir, resolve: resolve, timeout: timeout, mirrors: map[string]*mirror.Mirror{}}
	return func(ctx context.Context, ref Reference, cluster string) (map[string]string, error) {
		out := map[string]string{}
		for i, f := range ref.Files {
			vals, err := g.values(ctx, f, cluster)
			if err != nil {
				return nil, fmt.Errorf("files[%d] (%s in %s): %w", i, f.Path, gitutil.RedactURL(f.RepoURL), err)
			}
			maps.Copy(out, vals)
		}
		return out, nil
	}
}

// gitReader reads reference files through mirrors it keeps open, one per
// repository and credential, so that a refresh fetches what moved and
// does not open and check a mirror again.
type gitReader struct {
	dir     string
	resolve gitutil.CredentialResolver
	timeout time.Duration

	mu      sync.Mutex
	mirrors map[string]*mirror.Mirror
}

// values reads the cluster's entry of the file f.
func (g *gitReader) values(ctx context.Context, f FileRef, cluster string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	url, auth, err := gitutil.MergeURLCredentials(f.RepoURL, nil)
	if err != nil {
		return nil, err
	}
	if auth == nil && g.resolve != nil {
		if auth, err = g.resolve.Resolve(ctx, url); err != nil {
			return nil, err
		}
	}
	m, commit, err := g.commit(ctx, url, auth, f.TargetRevision)
	if err != nil {
		return nil, err
	}
	return readValues(m, commit, f.Path, cluster)
}

// commit brings the commit revision names now into the mirror of url and
// auth, and returns both.
func (g *gitReader) commit(ctx context.Context, url string, auth *gitutil.Auth, revision string) (*mirror.Mirror, gitutil.Hash, error) {
	rev, err := gitutil.ParseRevision(revision)
	if err != nil {
		return nil, gitutil.ZeroHash, err
	}
	refs, err := gitutil.ListRefs(ctx, url, auth, rev.RefPrefixes())
	if err != nil {
		return nil, gitutil.ZeroHash, err
	}
	res, err := gitutil.Resolve(rev, refs)
	if err != nil {
		return nil, gitutil.ZeroHash, err
	}
	key := sha256.Sum256([]byte(url + "\x00" + auth.Identity()))
	name := hex.EncodeToString(key[:12])
	g.mu.Lock()
	m := g.mirrors[name]
	if m == nil {
		if m, err = mirror.Open(filepath.Join(g.dir, name), url, mirror.Options{}); err == nil {
			g.mirrors[name] = m
		}
	}
	g.mu.Unlock()
	if err != nil {
		return nil, gitutil.ZeroHash, err
	}
	if m.HasCommit(res.Commit) {
		return m, res.Commit, nil
	}
	if res.Ref == "" {
		_, err := m.FetchCommit(ctx, auth, res.Commit)
		return m, res.Commit, err
	}
	fetched, err := m.FetchListed(ctx, auth, map[string]gitutil.Hash{res.Ref: refs.Refs[res.Ref]})
	if err == nil {
		err = fetched.RefErrors[res.Ref]
	}
	return m, fetched.Refs[res.Ref], err
}

// readValues reads the file at p of the commit: a map of cluster names to
// key/value pairs, of which it returns the cluster's.
func readValues(m *mirror.Mirror, commit gitutil.Hash, p, cluster string) (map[string]string, error) {
	fsys, err := m.FS(commit, mirror.Selection{})
	if err != nil {
		return nil, err
	}
	if c, ok := fsys.(io.Closer); ok {
		defer c.Close()
	}
	if p, err = mirror.CleanPath(p); err != nil {
		return nil, err
	}
	file, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, maxValuesFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxValuesFile {
		return nil, fmt.Errorf("larger than %d bytes", maxValuesFile)
	}
	var byCluster map[string]map[string]string
	if err := yaml.UnmarshalStrict(data, &byCluster); err != nil {
		return nil, fmt.Errorf("not a map of cluster names to key/value pairs: %w", err)
	}
	return byCluster[cluster], nil
}
