package gitsync

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/modwatch/modwatch/watcher"
)

// TrackingLabel is the label Numaplane marks the objects of a GitSync
// with (for apply.Config.TrackingLabel); its value is [TrackingValue].
const TrackingLabel = "numaplane.numaproj.io/tracking-id"

// TrackingValue is Numaplane's value of [TrackingLabel] for t, a GitSync's
// target (for apply.Config.TrackingValue): the GitSync's name, so that
// "kubectl get all -l numaplane.numaproj.io/tracking-id=<name>" finds what
// it applied.
//
// A name that is not a label value (GitSync names are DNS subdomains of up
// to 253 characters, label values at most 63) becomes its first 52
// characters, without the '-', '_' or '.' they end with, then '-' and the
// first 10 hex digits of the SHA-256 of "<namespace>/<name>": 63
// characters at most, ending alphanumeric, apart for each GitSync. For
// "web" in namespace "team-a" it is "web"; two GitSyncs of one name in two
// namespaces share their value, which the apply sink tells apart (see
// apply.Config.TrackingValue).
//
// For a target that is not a GitSync's (see [ParseTargetID]) it is "",
// which the apply sink refuses, naming the target.
func TrackingValue(t watcher.Target) string {
	namespace, name, ok := ParseTargetID(t.ID)
	if !ok {
		return ""
	}
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	prefix := name[:min(len(name), validation.LabelValueMaxLength-11)]
	if i := strings.IndexFunc(prefix, func(r rune) bool { return !labelValueRune(r) }); i >= 0 {
		prefix = prefix[:i] // never for a GitSync's name, which the apiserver checked
	}
	prefix = strings.Trim(prefix, "-_.")
	if prefix == "" {
		return hex.EncodeToString(sum[:5])
	}
	return prefix + "-" + hex.EncodeToString(sum[:5])
}

// labelValueRune reports whether r may be inside a label value.
func labelValueRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}
