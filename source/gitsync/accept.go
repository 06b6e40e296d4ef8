package gitsync

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/modwatch/modwatch/watcher/payload"
)

// ValidDestination refuses a GitSync whose spec.destination.namespace is
// not a namespace name (empty included), as Numaplane's reconciler does:
// nothing of it is applied, into "default" or anywhere. It is a
// [Config.Accept] (a program that accepts more wraps it).
func ValidDestination(_ metav1.Object, gs payload.GitSync) error {
	if errs := validation.IsDNS1123Label(gs.Destination.Namespace); len(errs) > 0 {
		return fmt.Errorf("spec.destination.namespace %q is not a namespace name: %s", gs.Destination.Namespace, strings.Join(errs, "; "))
	}
	return nil
}
