//go:build tools

// Package tools pins the main package that ../kube/build.sh compiles.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
