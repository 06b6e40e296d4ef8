package configmap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/gitutil"
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
	return func(ctx context.Context, ref Reference, cluster string) (map[string]string, error) {
		out := map[string]string{}
		for i, f := range ref.Files {
			vals, err := gitValues(ctx, dir, resolve, timeout, f, cluster)
			if err != nil {
				return nil, fmt.Errorf("files[%d] (%s in %s): %w", i, f.Path, gitutil.RedactURL(f.RepoURL), err)
			}
			maps.Copy(out, vals)
		}
		return out, nil
	}
}

func gitValues(ctx context.Context, dir string, resolve gitutil.CredentialResolver, timeout time.Duration, f FileRef, cluster string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url, auth, err := gitutil.MergeURLCredentials(f.RepoURL, nil)
	if err != nil {
		return nil, err
	}
	if auth == nil && resolve != nil {
		if auth, err = resolve.Resolve(ctx, url); err != nil {
			return nil, err
		}
	}
	rev, err := gitutil.ParseRevision(f.TargetRevision)
	if err != nil {
		return nil, err
	}
	refs, err := gitutil.ListRefs(ctx, url, auth, gitutil.WithRefPrefixes(rev.RefPrefixes()...))
	if err != nil {
		return nil, err
	}
	res, err := gitutil.Resolve(rev, refs)
	if err != nil {
		return nil, err
	}
	key := sha256.Sum256([]byte(url + "\x00" + auth.Identity()))
	m, err := gitutil.OpenMirror(filepath.Join(dir, hex.EncodeToString(key[:12])), url, gitutil.MirrorOptions{})
	if err != nil {
		return nil, err
	}
	if !m.HasCommit(res.Commit) {
		if res.Ref != "" {
			fetched, err := m.FetchListed(ctx, auth, map[string]plumbing.Hash{res.Ref: refs.Refs[res.Ref]})
			if err != nil {
				return nil, err
			}
			if e := fetched.RefErrors[res.Ref]; e != nil {
				return nil, e
			}
			res.Commit = fetched.Refs[res.Ref]
		} else if _, err := m.FetchCommit(ctx, auth, res.Commit); err != nil {
			return nil, err
		}
	}
	fsys, err := m.FS(res.Commit, gitutil.Selection{})
	if err != nil {
		return nil, err
	}
	if c, ok := fsys.(io.Closer); ok {
		defer c.Close()
	}
	p, err := gitutil.CleanPath(f.Path)
	if err != nil {
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
