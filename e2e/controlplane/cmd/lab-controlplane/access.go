package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const readyFileName = "ready.json"

// readyInfo is the machine-readable announcement of a started control plane.
type readyInfo struct {
	Name        string            `json:"name"`
	URL         string            `json:"url"`
	PID         int               `json:"pid"`
	CAFile      string            `json:"caFile"`
	EtcdURL     string            `json:"etcdUrl"`
	Kubeconfigs map[string]string `json:"kubeconfigs"`
}

// servingCA is the CA that signed the apiserver's self-signed serving certificate.
type servingCA struct {
	pem []byte
}

func serverURL(s *state) string { return fmt.Sprintf("https://127.0.0.1:%d", s.SecurePort) }

// waitReady polls /readyz, trusting only the CA the apiserver generated in --cert-dir.
func waitReady(ctx context.Context, dir string, s *state, apiserverDone <-chan error) (*servingCA, error) {
	var ca *servingCA
	var client *http.Client
	lastErr := errors.New("serving certificate not written yet")
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kube-apiserver not ready: %w (last: %v)", ctx.Err(), lastErr)
		case err := <-apiserverDone:
			return nil, fmt.Errorf("kube-apiserver stopped before ready: %v", err)
		case <-ticker.C:
		}
		if ca == nil {
			loaded, err := loadServingCA(dir)
			if err != nil {
				lastErr = err
				continue
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(loaded.pem)
			ca = loaded
			client = &http.Client{
				Timeout:   2 * time.Second,
				Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, serverURL(s)+"/readyz", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+s.Tokens["admin"])
		resp, err := client.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return ca, nil
		}
		lastErr = fmt.Errorf("/readyz: %d %s", resp.StatusCode, body)
	}
}

// loadServingCA picks the CA certificate out of the bundle kube-apiserver writes to
// --cert-dir (serving certificate followed by the CA that signed it).
func loadServingCA(dir string) (*servingCA, error) {
	raw, err := os.ReadFile(filepath.Join(certDir(dir), "apiserver.crt"))
	if err != nil {
		return nil, err
	}
	rest := raw
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		if cert.IsCA {
			return &servingCA{pem: pem.EncodeToMemory(block)}, nil
		}
	}
	return nil, errors.New("no CA certificate in apiserver.crt")
}

// writeAccess writes the CA file, one kubeconfig per lab user and ready.json.
func writeAccess(dir, name string, s *state, ca *servingCA) (*readyInfo, error) {
	caFile := filepath.Join(dir, "ca.crt")
	if err := writeFileAtomic(caFile, ca.pem, 0o644); err != nil {
		return nil, err
	}
	info := &readyInfo{
		Name:        name,
		URL:         serverURL(s),
		PID:         os.Getpid(),
		CAFile:      caFile,
		EtcdURL:     fmt.Sprintf("http://127.0.0.1:%d", s.EtcdClientPort),
		Kubeconfigs: map[string]string{},
	}
	for _, u := range labUsers {
		cfg := clientcmdapi.NewConfig()
		cluster := clientcmdapi.NewCluster()
		cluster.Server = info.URL
		cluster.CertificateAuthorityData = ca.pem
		cfg.Clusters[name] = cluster
		auth := clientcmdapi.NewAuthInfo()
		auth.Token = s.Tokens[u.Name]
		cfg.AuthInfos[u.Name] = auth
		context := clientcmdapi.NewContext()
		context.Cluster = name
		context.AuthInfo = u.Name
		contextName := fmt.Sprintf("%s-%s", name, u.Name)
		cfg.Contexts[contextName] = context
		cfg.CurrentContext = contextName
		path := filepath.Join(dir, fmt.Sprintf("kubeconfig-%s.yaml", u.Name))
		out, err := clientcmd.Write(*cfg)
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(path, out, 0o600); err != nil {
			return nil, err
		}
		info.Kubeconfigs[u.Name] = path
	}
	out, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return nil, err
	}
	return info, writeFileAtomic(filepath.Join(dir, readyFileName), out, 0o644)
}
