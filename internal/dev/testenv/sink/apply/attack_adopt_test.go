package apply_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher/payload"
)

// A target applied under the default value (the digest: before the
// program chose names) carries no owner annotation. A GitSync named as
// that digest (anyone who may create a GitSync can compute it) must not
// adopt the object by its value: the value names the other target's
// inventory, which records it.
func TestAttackAdoptByValueOfADigestNamedGitSync(t *testing.T) {
	ns := env.Namespace(t)
	before := newSink(t, apply.Config{InventoryNamespace: ns, TrackingLabel: attackLabel})
	victim := change("gitsync/team-b/db", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"x.yaml": file(configMap("x", "b"))})
	applyOK(t, before, victim)
	digest := get(t, configMaps, ns, "x").GetLabels()[attackLabel]
	require.Len(t, digest, 20)

	s := newSink(t, apply.Config{InventoryNamespace: ns, TrackingLabel: attackLabel, TrackingValue: byName, AdoptByValue: true})
	evil := change("gitsync/team-evil/"+digest, "c1", payload.Render{Namespace: ns}, fstest.MapFS{"x.yaml": file(configMap("x", "evil"))})
	_, err := s.Apply(ctxT(t), evil)
	assert.ErrorIs(t, err, apply.ErrConflict)
	assert.Equal(t, "b", cmValue(t, ns, "x"), "the victim's object is not taken over")
	evil.To, evil.FS = named("c2"), fstest.MapFS{"y.yaml": file(configMap("other", "evil"))}
	_, _ = s.Apply(ctxT(t), evil)
	require.NotNil(t, get(t, configMaps, ns, "x"), "nor deleted")
}
