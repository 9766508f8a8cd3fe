package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

const stateFileName = "lab-state.json"

// labUser is one fixed identity of the lab, authenticated by a static token.
type labUser struct {
	Name   string
	Groups []string
}

// labUsers are the identities tests use to show who may do what. Only admin carries
// rights by itself (system:masters); the lab grants the others through RBAC objects.
var labUsers = []labUser{
	{Name: "admin", Groups: []string{"system:masters"}},
	{Name: "configrollout-controller", Groups: []string{"configrollout:controllers"}},
	{Name: "approver-alice", Groups: []string{"configrollout:approvers"}},
	{Name: "approver-bob", Groups: []string{"configrollout:approvers"}},
	{Name: "viewer", Groups: []string{"configrollout:viewers"}},
	{Name: "lab-workload", Groups: []string{"configrollout:workloads"}},
	{Name: "tenant-a", Groups: []string{"configrollout:tenants"}},
}

// state is what must survive a restart with the same data directory.
type state struct {
	SecurePort     int               `json:"securePort"`
	EtcdClientPort int               `json:"etcdClientPort"`
	EtcdPeerPort   int               `json:"etcdPeerPort"`
	Tokens         map[string]string `json:"tokens"`
}

func loadOrCreateState(dir string) (*state, error) {
	path := filepath.Join(dir, stateFileName)
	s := &state{}
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, err
	}
	if s.Tokens == nil {
		s.Tokens = map[string]string{}
	}
	for _, u := range labUsers {
		if s.Tokens[u.Name] == "" {
			token, err := randomToken()
			if err != nil {
				return nil, err
			}
			s.Tokens[u.Name] = token
		}
	}
	// Keep earlier ports when they are still free, so that kubeconfigs and Region
	// objects written before a restart stay valid. The three must differ: the kernel
	// may hand back a port it just released, and two listeners of this process on one
	// port fail the start every time, the state file keeping the collision.
	chosen := map[int]bool{}
	for _, port := range []*int{&s.SecurePort, &s.EtcdClientPort, &s.EtcdPeerPort} {
		if *port != 0 && !chosen[*port] && portFree(*port) {
			chosen[*port] = true
			continue
		}
		for {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			if !chosen[p] {
				*port = p
				chosen[p] = true
				break
			}
		}
	}
	if err := writeTokenFile(dir, s); err != nil {
		return nil, err
	}
	if err := ensureServiceAccountKey(dir); err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return s, writeFileAtomic(path, out, 0o600)
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func tokenFilePath(dir string) string         { return filepath.Join(dir, "tokens.csv") }
func serviceAccountKeyPath(dir string) string { return filepath.Join(dir, "service-account.key") }

// writeTokenFile writes the --token-auth-file: token,user,uid,"group1,group2".
func writeTokenFile(dir string, s *state) error {
	var b strings.Builder
	for _, u := range labUsers {
		fmt.Fprintf(&b, "%s,%s,%s,\"%s\"\n", s.Tokens[u.Name], u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	return writeFileAtomic(tokenFilePath(dir), []byte(b.String()), 0o600)
}

// ensureServiceAccountKey keeps one signing key per data directory, so service-account
// tokens issued before a restart still verify after it.
func ensureServiceAccountKey(dir string) error {
	path := serviceAccountKeyPath(dir)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	block := &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}
	return writeFileAtomic(path, pem.EncodeToMemory(block), 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
