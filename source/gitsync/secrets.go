package gitsync

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// secrets returns the Secrets the set reads, by namespace and name.
func (set *credSet) secrets() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, rc := range set.creds {
		for _, src := range rc.Sources() {
			if r := src.FromKubernetesSecret; r != nil {
				if out[r.Namespace] == nil {
					out[r.Namespace] = map[string]bool{}
				}
				out[r.Namespace][r.Name] = true
			}
		}
	}
	return out
}

// Watch calls changed whenever a Secret the credentials read is created,
// changed or deleted, until ctx is done, following the Secrets a reloaded
// configuration names (see [Credentials.Set]). It watches Secrets in their
// namespaces only (RBAC: list and watch Secrets there). [Source] runs it
// when its [Config] has them as Credentials ([NewController] sets it).
func (c *Credentials) Watch(ctx context.Context, changed func()) error {
	if c.kube == nil {
		<-ctx.Done()
		return nil
	}
	for {
		set := c.cur.Load()
		wctx, cancel := context.WithCancel(ctx)
		var factories []informers.SharedInformerFactory
		for ns, names := range set.secrets() {
			f := informers.NewSharedInformerFactoryWithOptions(c.kube, 0, informers.WithNamespace(ns))
			ours := func(obj any) bool {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				sec, ok := obj.(*corev1.Secret)
				return !ok || names[sec.Name]
			}
			_, err := f.Core().V1().Secrets().Informer().AddEventHandler(cache.FilteringResourceEventHandler{
				FilterFunc: ours,
				Handler: cache.ResourceEventHandlerFuncs{
					AddFunc:    func(any) { changed() },
					UpdateFunc: func(any, any) { changed() },
					DeleteFunc: func(any) { changed() },
				},
			})
			if err != nil {
				cancel()
				for _, f := range factories {
					f.Shutdown()
				}
				return err
			}
			f.Start(wctx.Done())
			factories = append(factories, f)
		}
		select {
		case <-ctx.Done():
		case <-set.replaced:
		}
		cancel()
		for _, f := range factories {
			f.Shutdown()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}
