"""The kubelet pod-resources v1 messages: podresources_v1.proto and protoc's output for it (do not edit)."""
